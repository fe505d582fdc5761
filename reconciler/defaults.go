package reconciler

// DefaultListen is the daemon's default listen address: loopback only, since
// POST /reconcile is unauthenticated.
const DefaultListen = "127.0.0.1:8080"
