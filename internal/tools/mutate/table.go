package mutate

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteTable prints one row per result (id, result, time, test, rule), then
// the detail of every result that is not Caught.
func WriteTable(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tRESULT\tTIME\tTEST\tRULE")
	for _, r := range results {
		m := r.Mutation
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s -run '%s'\t%s\n", m.ID, r.Status, r.Elapsed.Round(time.Second), m.Test.Pkg, m.Test.Run, oneLine(m.Rule))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range results {
		if r.Status != Caught {
			fmt.Fprintf(w, "\n%s %s: %s\n", r.Status, r.Mutation.ID, r.Detail)
		}
	}
	return nil
}

// Summary counts results by status, in a line like "27 caught, 0 SURVIVED,
// 0 broken".
func Summary(results []Result) (line string, ok bool) {
	n := map[Status]int{}
	for _, r := range results {
		n[r.Status]++
	}
	line = fmt.Sprintf("%d mutations: %d caught, %d SURVIVED, %d broken", len(results), n[Caught], n[Survived], n[Broken])
	return line, n[Caught] == len(results) && len(results) > 0
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
