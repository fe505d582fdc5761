package specs

// Actions on a request that an approval may name (SubjectName).
const (
	ActionCancel  = "cancel"
	ActionRelease = "release"
)

// StandingReleaseAction is the action that releases the nodes firing run
// of a standing certification retains: "release:<run>", so that an
// approval names the one firing it releases (a standing certification's
// spec.release lists firings, outside its digest).
func StandingReleaseAction(run string) string { return ActionRelease + ":" + run }

// SubjectName is the name by which approvals and evidence documents refer
// to a spec object, "KIND/NAME", or to an action on a request,
// "CertificationRequest/NAME#ACTION" (action "" names the object itself).
// It is the one place the form is written; signing.ParseSubjectName reads
// it back.
func SubjectName(kind, name, action string) string {
	s := kind + "/" + name
	if action != "" {
		s += "#" + action
	}
	return s
}
