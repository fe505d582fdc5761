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

// FieldChange is one identity field whose value differs between two
// snapshots of a node.
type FieldChange struct {
	Field, Was, Now string
}

// IdentityChanges lists the identity fields (uid, systemUUID, bootID,
// kernel, gpuProduct, gpuDriver, in that order) in which now differs from
// was: the node is not the machine was describes any more.
func IdentityChanges(was, now NodeSnapshot) []FieldChange {
	var out []FieldChange
	for _, f := range []FieldChange{
		{"uid", was.UID, now.UID},
		{"systemUUID", was.SystemUUID, now.SystemUUID},
		{"bootID", was.BootID, now.BootID},
		{"kernel", was.Kernel, now.Kernel},
		{"gpuProduct", was.GPUProduct, now.GPUProduct},
		{"gpuDriver", was.GPUDriver, now.GPUDriver},
	} {
		if f.Was != f.Now {
			out = append(out, f)
		}
	}
	return out
}
