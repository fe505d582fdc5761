package report

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"path"
	"sort"
	"strings"
	"time"

	"signet.dev/signet/evidence"
	"signet.dev/signet/evidence/audit"
	"signet.dev/signet/specs"
)

//go:embed templates/*.html templates/style.css
var files embed.FS

// pageTemplates are the page kinds, each the base layout plus its file.
var pageTemplates = map[string]*template.Template{}

func init() {
	for _, name := range []string{"index", "run", "node", "profile"} {
		t := template.New("base.html").Funcs(funcs)
		template.Must(t.ParseFS(files, "templates/base.html", "templates/"+name+".html"))
		pageTemplates[name] = t
	}
}

var funcs = template.FuncMap{
	"time": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"date": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02")
	},
	"short": func(s string) string {
		if len(s) > 12 {
			return s[:12]
		}
		return s
	},
	"hex": func(d any) string { return strings.TrimPrefix(fmt.Sprint(d), "sha256:") },
	"vclass": func(v specs.Verdict) string {
		if v == "" {
			return "none"
		}
		return strings.ToLower(string(v))
	},
	"duration": func(a, b time.Time) string {
		if a.IsZero() || b.IsZero() {
			return "—"
		}
		return b.Sub(a).Round(time.Millisecond).String()
	},
	"json": func(raw json.RawMessage) string { return string(raw) },
	"span": func(d time.Duration) string {
		if d > 0 && d%(24*time.Hour) == 0 {
			return fmt.Sprintf("%d days", d/(24*time.Hour))
		}
		return d.String()
	},
	"join":  strings.Join,
	"joinc": func(s []string) string { return strings.Join(s, ", ") },
	"add":   func(a, b int) int { return a + b },
	"pct": func(n, d int) string {
		if d == 0 {
			return "—"
		}
		return fmt.Sprintf("%.0f%%", 100*float64(n)/float64(d))
	},
}

// page is what every template gets: the root prefix of links from the
// page, its title, and its own data.
type page struct {
	Root  string
	Title string
	Repo  string
	Tip   string
	AsOf  time.Time
	Data  any
}

func (m *model) render(name, at, title string, data any) ([]byte, error) {
	depth := strings.Count(at, "/")
	p := page{Root: strings.Repeat("../", depth), Title: title, Repo: m.Audit.Repo, Tip: m.Audit.Tip, AsOf: m.AsOf, Data: data}
	var b bytes.Buffer
	if err := pageTemplates[name].Execute(&b, p); err != nil {
		return nil, fmt.Errorf("report: %s: %w", at, err)
	}
	return b.Bytes(), nil
}

// pages renders every page of the report, by path under the output
// directory.
func (m *model) pages(pageSize int) (map[string][]byte, error) {
	out, _, err := m.somePages(pageSize, m.nodes(), nil)
	return out, err
}

// somePages renders the pages of the report that only selects (every
// page when only is nil; the index and the style sheet always), by path
// under the output directory, and lists the paths of every page of the
// report, rendered or not, sorted.
func (m *model) somePages(pageSize int, nodes map[nodeKey][]*nodeRun, only *selection) (map[string][]byte, []string, error) {
	out := map[string][]byte{}
	var all []string
	css, err := files.ReadFile("templates/style.css")
	if err != nil {
		return nil, nil, err
	}
	out["style.css"] = css
	all = append(all, "style.css")
	archives, err := m.indexPages(out, nodes, pageSize, only)
	if err != nil {
		return nil, nil, err
	}
	all = append(all, "index.html")
	for i := 1; i <= archives; i++ {
		all = append(all, archiveHref(i))
	}
	for _, r := range m.Runs {
		all = append(all, r.Href())
		if only != nil && !only.runs[r.Dir] {
			continue
		}
		b, err := m.render("run", r.Href(), "run "+r.ID, m.runPage(r))
		if err != nil {
			return nil, nil, err
		}
		out[r.Href()] = b
	}
	for k, rs := range nodes {
		at := nodeHref(k)
		all = append(all, at)
		if only != nil && !only.nodes[k] {
			continue
		}
		b, err := m.render("node", at, "node "+k.Node, nodePage{Key: k, Runs: rs, Owner: m.Owner})
		if err != nil {
			return nil, nil, err
		}
		out[at] = b
	}
	for _, pp := range m.profilePages(only) {
		at := profileHref(pp.Name)
		all = append(all, at)
		if only != nil && !only.profiles[pp.Name] {
			continue
		}
		b, err := m.render("profile", at, "profile "+pp.Name, pp)
		if err != nil {
			return nil, nil, err
		}
		out[at] = b
	}
	sort.Strings(all)
	return out, all, nil
}

func nodeHref(k nodeKey) string   { return "nodes/" + k.Cluster + "/" + k.Node + ".html" }
func profileHref(n string) string { return "profiles/" + n + ".html" }

// summaryRow counts the nodes of one cluster and profile by state.
type summaryRow struct {
	Cluster, Profile                                              string
	Nodes, Certified, Expiring, Failing, Retained, Open, Unproven int
}

// nodeRow is one node's line on the index.
type nodeRow struct {
	Key     nodeKey
	Href    string
	Profile string
	Latest  *nodeRun
	State   string
	Until   time.Time
}

type indexPage struct {
	Summary        []summaryRow
	Nodes          []nodeRow
	Profiles       []string
	Findings       []audit.Finding
	BranchFindings int
	Runs           []*run
	// Page is 0 on the index, i on archive page i of Pages (oldest 1).
	Page, Pages   int
	Prev, Next    string
	Archive       []archiveLink
	Clean         bool
	Withheld      int
	TTL, Expiring time.Duration
	Audit         *audit.Report
}

var stateNames = map[nodeState]string{stateNone: "expired", stateCertified: "certified", stateExpiring: "expiring soon",
	stateFailing: "failing", stateRetained: "retained", stateOpen: "running", stateUnproven: "unproven (latest run withheld)"}

// indexPages renders the index and the archive pages (those from
// only.archivesFrom on when only is set) and returns the number of
// archive pages.
func (m *model) indexPages(out map[string][]byte, nodes map[nodeKey][]*nodeRun, pageSize int, only *selection) (int, error) {
	sums := map[[2]string]*summaryRow{}
	var rows []nodeRow
	for k, rs := range nodes {
		seen := map[string]bool{}
		for _, nr := range rs { // newest first: the first of a profile is its latest
			prof := nr.Run.Profile
			if seen[prof] {
				continue
			}
			seen[prof] = true
			st, until := m.state(nr)
			s := sums[[2]string{k.Cluster, prof}]
			if s == nil {
				s = &summaryRow{Cluster: k.Cluster, Profile: prof}
				sums[[2]string{k.Cluster, prof}] = s
			}
			s.Nodes++
			switch st {
			case stateCertified:
				s.Certified++
			case stateExpiring:
				s.Certified++
				s.Expiring++
			case stateFailing:
				s.Failing++
			case stateRetained:
				s.Failing++
				s.Retained++
			case stateOpen:
				s.Open++
			case stateUnproven:
				s.Unproven++
			}
			rows = append(rows, nodeRow{Key: k, Href: nodeHref(k), Profile: prof, Latest: nr, State: stateNames[st], Until: until})
		}
	}
	ip := indexPage{Findings: m.Audit.Findings, BranchFindings: len(m.BranchFindings), Clean: m.Audit.Clean(), TTL: m.TTL, Expiring: m.Expiring, Audit: m.Audit}
	for _, s := range sums {
		ip.Summary = append(ip.Summary, *s)
	}
	sort.Slice(ip.Summary, func(i, j int) bool {
		a, b := ip.Summary[i], ip.Summary[j]
		return a.Cluster+"\x00"+a.Profile < b.Cluster+"\x00"+b.Profile
	})
	sort.Slice(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		return a.Key.Cluster+"\x00"+a.Key.Node+"\x00"+a.Profile < b.Key.Cluster+"\x00"+b.Key.Node+"\x00"+b.Profile
	})
	ip.Nodes = rows
	profiles := map[string]bool{}
	for _, r := range m.Runs {
		if r.Withheld {
			ip.Withheld++
		} else if r.Profile != "" {
			profiles[r.Profile] = true
		}
	}
	for p := range profiles {
		ip.Profiles = append(ip.Profiles, p)
	}
	sort.Strings(ip.Profiles)
	// Runs are paged oldest first into fixed archive pages (runs-1.html
	// holds the first pageSize runs ever), so that a new run changes the
	// last archive page and the index only; the index shows the newest.
	chrono := make([]*run, len(m.Runs))
	for i, r := range m.Runs {
		chrono[len(m.Runs)-1-i] = r
	}
	pages := (len(chrono) + pageSize - 1) / pageSize
	ip.Page, ip.Pages = 0, pages
	ip.Runs = m.Runs[:min(len(m.Runs), pageSize)]
	if pages > 0 {
		ip.Next = archiveHref(pages)
	}
	for i := 1; i <= pages; i++ {
		ip.Archive = append(ip.Archive, archiveLink{Href: archiveHref(i), First: chrono[(i-1)*pageSize].ID, Last: chrono[min(len(chrono), i*pageSize)-1].ID})
	}
	b, err := m.render("index", "index.html", "signet report", ip)
	if err != nil {
		return 0, err
	}
	out["index.html"] = b
	for i := 1; i <= pages; i++ {
		if only != nil && i < only.archivesFrom {
			continue
		}
		chunk := chrono[(i-1)*pageSize : min(len(chrono), i*pageSize)]
		p := indexPage{Page: i, Pages: pages}
		for j := len(chunk) - 1; j >= 0; j-- {
			p.Runs = append(p.Runs, chunk[j])
		}
		if i < pages {
			p.Prev = archiveHref(i + 1)
		}
		if i > 1 {
			p.Next = archiveHref(i - 1)
		}
		b, err := m.render("index", archiveHref(i), fmt.Sprintf("signet report, runs page %d", i), p)
		if err != nil {
			return 0, err
		}
		out[archiveHref(i)] = b
	}
	return pages, nil
}

// archiveLink names one archive page by its first and last run.
type archiveLink struct{ Href, First, Last string }

func archiveHref(i int) string { return fmt.Sprintf("runs-%d.html", i) }

// cell is one node × check of a run's matrix.
type cell struct {
	Check    string
	Index    int
	Verdict  specs.Verdict
	Skipped  bool
	Outcome  *evidence.ParticipantOutcome
	Started  time.Time
	Ended    time.Time
	Measures []measure
	Logs     []logTail
	// Re-verification.
	CheckPath, CheckDigest string
	CheckCommit            string
}

type measure struct{ Name, Value string }

type logTail struct {
	Path, Name, Digest string
	Text               string
}

type matrixRow struct {
	Node     string
	Href     string
	Verdict  specs.Verdict
	Snapshot evidence.FileRef
	Cells    []cell
}

type approval struct {
	Document string
	Owners   []string
}

type runPage struct {
	Run       *run
	Docs      *audit.RunDocuments
	Checks    []string
	Rows      []matrixRow
	Approvals []approval
	Signers   []string
	Branch    string
	Repo      string
	Evidence  audit.FileInfo
	Receipt   audit.FileInfo
	SignerKey string
	Profile   string
}

func (m *model) runPage(r *run) runPage {
	rp := runPage{Run: r, Branch: m.Audit.Branch, Repo: m.Audit.Repo, Profile: profileHref(r.Profile)}
	if r.Withheld {
		return rp
	}
	d := r.Docs
	rp.Docs = d
	rp.Evidence, rp.Receipt = d.Files[evidence.EvidenceFile], d.Files[evidence.ReceiptFile]
	signers := append([]string(nil), d.Signers...)
	sort.Strings(signers)
	for _, k := range signers {
		rp.Signers = append(rp.Signers, m.Owner(k))
	}
	rp.SignerKey = "reconciler"
	if len(rp.Signers) > 0 {
		rp.SignerKey = rp.Signers[0]
	}
	for _, rel := range []string{evidence.FiringFile, evidence.AdmissionFile, evidence.CancelFile, evidence.ReleaseFile} {
		keys := d.ApprovedBy[rel]
		if len(keys) == 0 {
			continue
		}
		a := approval{Document: rel}
		for _, k := range keys {
			a.Owners = append(a.Owners, m.Owner(k))
		}
		sort.Strings(a.Owners)
		rp.Approvals = append(rp.Approvals, a)
	}
	if d.Admission == nil {
		return rp // fired, not admitted yet: the page shows the firing
	}
	checks := d.Admission.ProfileObject.Spec.Checks
	for _, ck := range checks {
		rp.Checks = append(rp.Checks, ck.Name)
	}
	for _, p := range d.Admission.Participants {
		row := matrixRow{Node: p.Node, Href: nodeHref(nodeKey{r.Cluster, p.Node}), Snapshot: p.Snapshot}
		if d.Evidence != nil {
			for _, n := range d.Evidence.Nodes {
				if n.Node == p.Node {
					row.Verdict = n.Verdict
				}
			}
		}
		for i, ck := range checks {
			c := cell{Check: ck.Name, Index: i}
			if d.Evidence != nil && i < len(d.Evidence.Checks) && d.Evidence.Checks[i].Skipped {
				c.Skipped, c.Verdict = true, d.Evidence.Checks[i].Verdict
			}
			if i < len(d.Checks) && d.Checks[i] != nil {
				ce := d.Checks[i]
				c.Started, c.Ended = ce.StartedAt, ce.EndedAt
				rel := strings.TrimPrefix(evidence.CheckPath(d.Dir, i, ck.Name), d.Dir+"/")
				fi := d.Files[rel]
				c.CheckPath, c.CheckDigest, c.CheckCommit = d.Path(rel), string(fi.Digest), fi.Commit
				for j := range ce.Participants {
					po := &ce.Participants[j]
					if po.Node != p.Node {
						continue
					}
					c.Outcome, c.Verdict = po, po.Verdict
					if po.Result != nil {
						for k, v := range po.Result.Measurements {
							c.Measures = append(c.Measures, measure{k, string(v)})
						}
						sort.Slice(c.Measures, func(a, b int) bool { return c.Measures[a].Name < c.Measures[b].Name })
					}
					for _, l := range po.Logs {
						lt := logTail{Path: l.Path, Name: path.Base(l.Path), Digest: string(l.Digest)}
						if b, ok := d.Logs[d.Rel(l.Path)]; ok {
							lt.Text = string(b)
						} else {
							lt.Text = "(not verified: not shown)"
						}
						c.Logs = append(c.Logs, lt)
					}
				}
			}
			row.Cells = append(row.Cells, c)
		}
		rp.Rows = append(rp.Rows, row)
	}
	return rp
}

type nodePage struct {
	Key   nodeKey
	Runs  []*nodeRun
	Owner func(string) string
}

// bucket is one day of a profile's runs.
type bucket struct {
	Day        string
	Runs, Pass int
	X, Y, W, H float64
	LabelX     float64
	Label      bool
	Rate       string
}

type checkRate struct {
	Name                    string
	Runs, Pass, Fail, Other int
}

type profilePage struct {
	Name   string
	Runs   []*run
	Pass   int
	Days   []bucket
	Checks []checkRate
	Width  int
	Height int
}

// profilePages builds one page per profile over its verified runs: pass
// rate per day (an inline SVG, oldest day left) and per check; with only
// set, the pages of the profiles it names are built, the others left
// with their name alone.
func (m *model) profilePages(only *selection) []profilePage {
	by := map[string]*profilePage{}
	var names []string
	for _, r := range m.Runs {
		if r.Withheld || r.Profile == "" {
			continue
		}
		pp := by[r.Profile]
		if pp == nil {
			pp = &profilePage{Name: r.Profile}
			by[r.Profile] = pp
			names = append(names, r.Profile)
		}
		pp.Runs = append(pp.Runs, r)
	}
	sort.Strings(names)
	var out []profilePage
	for _, n := range names {
		pp := by[n]
		if only != nil && !only.profiles[n] {
			out = append(out, profilePage{Name: n})
			continue
		}
		days := map[string]*bucket{}
		var order []string
		checks := map[string]*checkRate{}
		var corder []string
		for _, r := range pp.Runs {
			if r.Verdict == "" {
				continue
			}
			day := r.AdmittedAt.UTC().Format("2006-01-02")
			b := days[day]
			if b == nil {
				b = &bucket{Day: day}
				days[day] = b
				order = append(order, day)
			}
			b.Runs++
			if r.Verdict == specs.VerdictPass {
				b.Pass++
				pp.Pass++
			}
			for i, ck := range r.Docs.Admission.ProfileObject.Spec.Checks {
				c := checks[ck.Name]
				if c == nil {
					c = &checkRate{Name: ck.Name}
					checks[ck.Name] = c
					corder = append(corder, ck.Name)
				}
				c.Runs++
				v := specs.VerdictError
				if r.Docs.Evidence != nil && i < len(r.Docs.Evidence.Checks) {
					v = r.Docs.Evidence.Checks[i].Verdict
				}
				switch v {
				case specs.VerdictPass:
					c.Pass++
				case specs.VerdictFail:
					c.Fail++
				default:
					c.Other++
				}
			}
		}
		sort.Strings(order)
		if len(order) > 90 {
			order = order[len(order)-90:]
		}
		const w, h, top = 600.0, 160.0, 10.0
		pp.Width, pp.Height = int(w), int(h)+30
		bw := w / float64(max(1, len(order)))
		for i, day := range order {
			b := *days[day]
			rate := float64(b.Pass) / float64(b.Runs)
			b.W = min(bw*0.8, 40)
			b.X = float64(i)*bw + (bw-b.W)/2
			b.H = rate * (h - top)
			b.Y = h - b.H
			b.LabelX = float64(i)*bw + bw/2
			b.Label = len(order) <= 10 || i == 0 || i == len(order)-1
			b.Rate = fmt.Sprintf("%.0f%%", rate*100)
			pp.Days = append(pp.Days, b)
		}
		for _, c := range corder {
			pp.Checks = append(pp.Checks, *checks[c])
		}
		out = append(out, *pp)
	}
	return out
}
