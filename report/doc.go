// Package report writes signet's static HTML report of an evidence branch
// (signet report): a fleet index, one page per run, per node and per
// profile, self-contained (no script, nothing fetched from the network),
// readable in light and dark mode and on a narrow screen.
//
// Every number on it comes from the audit: Build runs audit.Branch and
// takes the documents it verified through audit.Options.Observe; nothing
// is parsed a second way. What it refuses to do:
//   - write a page from a document that did not verify: a run that any
//     finding names, or every run when the branch itself has a finding
//     (history, commit signatures, a pin), is shown withheld, with the
//     audit's findings instead of its verdicts;
//   - depend on when it runs: the same branch gives the same bytes (times
//     are the documents' own, "as of" is the latest time a verified
//     document states), so a second report after one new run writes
//     only the pages that changed (a manifest lists every page);
//   - depend on how it was built: a Builder's incremental report (the
//     audit since its last report, the pages that changed rendered, the
//     rest linked after their digests are checked) has the bytes of a
//     full one, and falls back to a full one whenever what it kept does
//     not hold;
//   - let a reader see a half-written report: each report is a new
//     generation directory, written whole and then switched in (the
//     current link, the entry index.html with a <base> into it); the
//     one it replaces stays until the next report;
//   - touch anything in the output directory but its own names
//     (gens/, current, index.html, .lock).
package report
