package evidence

// NodeSnapshot is a participant's identity at admission, stored as plain
// JSON at runs/…/nodes/<node>.json. It names the run and cluster so that
// its digest is unique to this run; check and run evidence use that file
// as their in-toto subject (DESIGN §6).
type NodeSnapshot struct {
	Cluster     string            `json:"cluster"`
	Run         string            `json:"run"`
	Name        string            `json:"name"`
	UID         string            `json:"uid"`
	SystemUUID  string            `json:"systemUUID,omitempty"`
	BootID      string            `json:"bootID,omitempty"`
	Kernel      string            `json:"kernel,omitempty"`
	GPUProduct  string            `json:"gpuProduct,omitempty"`
	GPUDriver   string            `json:"gpuDriver,omitempty"`
	Capacity    map[string]string `json:"capacity,omitempty"`
	Allocatable map[string]string `json:"allocatable,omitempty"`
}
