package reconciler

// DefaultListen is the daemon's default listen address (health, readiness,
// status and the reconcile trigger): loopback only, since /status shows
// every object and run.
const DefaultListen = "127.0.0.1:8080"
