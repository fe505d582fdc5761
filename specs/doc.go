// Package specs holds signet's spec kinds, CertificationProfile and
// CertificationRequest, and everything that turns a spec path of a
// repository into objects other packages may trust: strict YAML parsing,
// validation of every rule of DESIGN §2 and §3, digests (one sha256
// representation, bundle aggregate digests), kustomize or plain rendering
// over an fs.FS, RFC 8785 canonical JSON and the derived run deadline and
// eligibility floor. It also holds the check result contract (DESIGN §4).
//
// Render is the entry point: it returns every problem as a Finding (file,
// document index, field path, what is wrong) rather than stopping at the
// first, and reserves its error for input that cannot be read.
//
// What it refuses to do:
//   - expand YAML aliases or anchors, accept merge keys, duplicate keys,
//     custom tags or unknown fields: such a document is reported, never
//     decoded with a guess;
//   - read a spec file larger than MaxSpecFileBytes;
//   - skip a document silently when its apiVersion is in the signet.dev group
//     or its kind is a signet kind but the other is wrong: that is a finding.
//     Documents of other groups (ConfigMaps, kustomize inputs, …) are
//     ignored, as are files under .signet/ and inside a profile's bundle;
//   - follow symlinks, fetch remote kustomize resources, or touch anything
//     outside the fs.FS it is given;
//   - decide what a cluster allows: the workload ceiling and the trust
//     policy belong to the reconciler's config (DESIGN §2), and whether a
//     local request names this machine's hostname is checked where the
//     hostname is known. specs checks only that such a request names one node.
//
// Decisions recorded here:
//   - Bundle paths (spec.bundle.path) are relative to the repository root,
//     the root of the fs.FS; scripts are relative to the bundle.
//   - Canonical JSON (what approvals sign) holds apiVersion, kind,
//     metadata.name and the spec, never labels or annotations. A profile's
//     onFailure is written out ("continue" when omitted). A request's holds
//     only its execution fields: profile, nodes, selector, count; cancel and
//     release are left out, so the action approvals name the same digest.
//   - A local check takes no workload (it is a process on this machine);
//     a pod or mpijob check needs one with an image pinned by digest
//     (repo[:tag]@sha256:<64 hex>; the tag is informative only). GPUs are
//     asked for with gpuCount, never as nvidia.com/gpu in resources.
//   - Deadlines are whole seconds "600s", 1 s to MaxCheckDeadline; the run
//     deadline adds CheckReserve (60 s) per check.
//   - The ConfigMap bound on pod/mpijob bundles, MaxConfigMapBundleSize,
//     counts the bytes of the bundle's files.
package specs
