// Package pagetable keeps a large sorted table of key/value records as
// content-addressed pages, so that a key can be read without reading the
// table whole and every byte read is proven by a digest in the table's
// page list, the small document the caller signs.
//
// A page is records "key\tvalue\n" in strictly increasing key order; it
// is stored under the hex SHA-256 of its bytes. A new version of a table
// (Update) rewrites only the pages whose key range receives a put; every
// other page keeps its digest.
//
// What it refuses to do:
//   - return a value from a page that does not match its listing: a
//     digest, record count, first key, key order, key range or format
//     that differs is ErrCorrupt, for the whole page;
//   - accept keys out of order or twice, an empty key, a key holding a
//     tab or newline, or a value holding a newline;
//   - modify a table: Table is immutable, Update returns a new page list.
package pagetable

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
)

// PageSize is the size at which Writer cuts a page: 128 KiB.
const PageSize = 128 << 10

// pageSize is PageSize; tests lower it to get many pages from few records.
var pageSize = PageSize

// SetPageSize makes Writer and Update cut pages at n bytes until the
// returned function restores PageSize: for tests of packages that build
// tables, to get many pages from a few records. Not while a table is
// written.
func SetPageSize(n int) (restore func()) {
	old := pageSize
	pageSize = n
	return func() { pageSize = old }
}

// cacheSize is how many decoded pages a Table keeps.
const cacheSize = 32

// Page is one page of a table, as listed in the signed page list.
type Page struct {
	First   string `json:"first"`  // the first key it holds
	Digest  string `json:"sha256"` // hex SHA-256 of its bytes
	Records int    `json:"records"`
}

// ErrCorrupt means a page does not match its listing (digest, order,
// range, count or format), or a listing is malformed. It is never retried.
var ErrCorrupt = errors.New("pagetable: page does not match its listing")

// Table reads a table from its page list. It is safe for concurrent use.
type Table struct {
	pages []Page
	store Store

	cache pageCache[int] // by page index
}

// page is a verified page: its bytes and where each record lies in them.
type page struct {
	data []byte
	recs []rec
	used uint64 // pageCache.tick when last used, under pageCache.mu
}

// rec is a record's offsets in its page: data[start:tab] is its key,
// data[tab+1:end] its value, data[end] its newline.
type rec struct{ start, tab, end int }

func (p *page) key(i int) []byte   { return p.data[p.recs[i].start:p.recs[i].tab] }
func (p *page) value(i int) []byte { return p.data[p.recs[i].tab+1 : p.recs[i].end] }

// search returns the index of the first record whose key is >= key.
func (p *page) search(key string) int {
	return sort.Search(len(p.recs), func(i int) bool { return string(p.key(i)) >= key })
}

// get returns the value of key in the page, if it holds key.
func (p *page) get(key string) (value string, ok bool) {
	j := p.search(key)
	if j == len(p.recs) || string(p.key(j)) != key {
		return "", false
	}
	return string(p.value(j)), true
}

// Open checks the listing itself (First non-empty and strictly
// increasing, digests of 64 lowercase hex digits, Records >= 1) and
// returns the table; it reads no page. Its errors wrap ErrCorrupt and
// name the page's index.
func Open(pages []Page, store Store) (*Table, error) {
	for i, p := range pages {
		var bad string
		switch {
		case p.First == "":
			bad = "first key is empty"
		case i > 0 && p.First <= pages[i-1].First:
			bad = fmt.Sprintf("first key is not after page %d's %q", i-1, pages[i-1].First)
		case checkDigest(p.Digest) != nil:
			bad = fmt.Sprintf("sha256 %q is not 64 lowercase hex digits", p.Digest)
		case p.Records < 1:
			bad = fmt.Sprintf("records is %d, not at least 1", p.Records)
		}
		if bad != "" {
			return nil, fmt.Errorf("%w: listing page %d (first %q): %s", ErrCorrupt, i, p.First, bad)
		}
	}
	return &Table{pages: slices.Clone(pages), store: store, cache: pageCache[int]{m: map[int]*page{}}}, nil
}

// Pages returns a copy of the table's page list.
func (t *Table) Pages() []Page { return slices.Clone(t.pages) }

// Get returns the value of key, or ok false when the table does not hold
// it. A page that fails verification is an error wrapping ErrCorrupt; a
// page missing from the store is the store's error. Either way no value
// is returned.
func (t *Table) Get(key string) (value string, ok bool, err error) {
	i := sort.Search(len(t.pages), func(i int) bool { return t.pages[i].First > key }) - 1
	if i < 0 { // before the first key
		return "", false, nil
	}
	pg, err := t.page(i)
	if err != nil {
		return "", false, err
	}
	value, ok = pg.get(key)
	return value, ok, nil
}

// page returns page i, verified, from the cache or the store.
func (t *Table) page(i int) (*page, error) {
	if pg := t.cache.get(i); pg != nil {
		return pg, nil
	}
	next := ""
	if i+1 < len(t.pages) {
		next = t.pages[i+1].First
	}
	pg, err := load(t.store, t.pages[i], next, "page %d", i)
	if err != nil {
		return nil, err
	}
	return t.cache.put(i, pg), nil
}

// load reads page p, followed by a page whose first key is next, from
// store and verifies it; format and arg name the page in its errors.
func load(store Store, p Page, next, format string, arg any) (*page, error) {
	data, err := store.Get(p.Digest)
	if err != nil {
		return nil, fmt.Errorf("pagetable: %s (first %q, sha256 %s): %w", fmt.Sprintf(format, arg), p.First, p.Digest, err)
	}
	pg, err := decode(data, p, next)
	if err != nil {
		return nil, fmt.Errorf("%w: %s (first %q): %w", ErrCorrupt, fmt.Sprintf(format, arg), p.First, err)
	}
	return pg, nil
}

// pageCache keeps the cacheSize most recently used verified pages. It is
// safe for concurrent use.
type pageCache[K comparable] struct {
	mu   sync.Mutex
	tick uint64 // counts uses
	m    map[K]*page
}

// get returns the page of k, nil when it is not kept.
func (c *pageCache[K]) get(k K) *page {
	c.mu.Lock()
	defer c.mu.Unlock()
	pg := c.m[k]
	if pg != nil {
		c.tick++
		pg.used = c.tick
	}
	return pg
}

// put keeps pg as the page of k, dropping the least recently used page
// when full, and returns the page kept: another reader's when it put one
// meanwhile.
func (c *pageCache[K]) put(k K, pg *page) *page {
	c.mu.Lock()
	defer c.mu.Unlock()
	if kept, ok := c.m[k]; ok {
		return kept
	}
	if len(c.m) >= cacheSize {
		var oldest K
		first := true
		for j, p := range c.m {
			if first || p.used < c.m[oldest].used {
				oldest, first = j, false
			}
		}
		delete(c.m, oldest)
	}
	c.tick++
	pg.used = c.tick
	c.m[k] = pg
	return pg
}

// decode verifies data against its listing p, next being the following
// page's First ("" for the last page), and returns it decoded. Its error
// says what failed.
func decode(data []byte, p Page, next string) (*page, error) {
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); got != p.Digest {
		return nil, fmt.Errorf("its bytes hash to sha256 %s, not %s", got, p.Digest)
	}
	pg := &page{data: data, recs: make([]rec, 0, min(p.Records, len(data)/3))}
	for start := 0; start < len(data); {
		n := len(pg.recs)
		end := bytes.IndexByte(data[start:], '\n')
		if end < 0 {
			return nil, fmt.Errorf("record %d has no newline", n)
		}
		end += start
		tab := bytes.IndexByte(data[start:end], '\t')
		if tab <= 0 {
			return nil, fmt.Errorf("record %d has no tab after a non-empty key", n)
		}
		tab += start
		pg.recs = append(pg.recs, rec{start, tab, end})
		key := pg.key(n) // compared as string(key): no copy
		switch {
		case n == p.Records:
			return nil, fmt.Errorf("it holds more than %d records", p.Records)
		case n == 0 && string(key) != p.First:
			return nil, fmt.Errorf("its first key is %q", key)
		case n > 0 && string(key) <= string(pg.key(n-1)):
			return nil, fmt.Errorf("key %q of record %d is not after %q", key, n, pg.key(n-1))
		case next != "" && string(key) >= next:
			return nil, fmt.Errorf("key %q of record %d is not before the next page's first key %q", key, n, next)
		}
		start = end + 1
	}
	if len(pg.recs) != p.Records {
		return nil, fmt.Errorf("it holds %d records, not %d", len(pg.recs), p.Records)
	}
	return pg, nil
}

// Update returns the page list of t with puts merged in: a put replaces
// the value of a key t holds, or adds the key. It writes the rewritten
// pages to dst and carries every other page into dst (Carry). Only pages
// whose key range receives a put are rewritten, a key before the first
// page's First going into the first page; a rewritten page larger than
// twice PageSize is split into pages of about PageSize. t is not
// modified.
func (t *Table) Update(puts map[string]string, dst Store) ([]Page, error) {
	keys, err := sortedPuts(puts)
	if err != nil {
		return nil, err
	}
	if len(t.pages) == 0 {
		w := NewWriter(dst)
		for _, k := range keys {
			if err := w.Add(k, puts[k]); err != nil {
				return nil, err
			}
		}
		return w.Finish()
	}
	out := make([]Page, 0, len(t.pages))
	for i, p := range t.pages {
		lo, hi := 0, len(keys)
		if i > 0 {
			lo = sort.SearchStrings(keys, p.First)
		}
		if i+1 < len(t.pages) {
			hi = sort.SearchStrings(keys, t.pages[i+1].First)
		}
		if lo == hi {
			if err := Carry(dst, t.store, p.Digest); err != nil {
				return nil, fmt.Errorf("pagetable: carrying page %d (first %q): %w", i, p.First, err)
			}
			out = append(out, p)
			continue
		}
		pg, err := t.page(i)
		if err != nil {
			return nil, err
		}
		data, starts := merge(pg, keys[lo:hi], puts)
		pages, err := split(dst, data, starts)
		if err != nil {
			return nil, err
		}
		out = append(out, pages...)
	}
	return out, nil
}

// sortedPuts returns the keys of puts in order, or an error naming a
// record the page format cannot hold.
func sortedPuts(puts map[string]string) ([]string, error) {
	keys := make([]string, 0, len(puts))
	for k, v := range puts {
		if err := checkRecord(k, v); err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys, nil
}

// merge returns the records of pg with the sorted keys put into it, and
// the offset where each record starts.
func merge(pg *page, keys []string, puts map[string]string) ([]byte, []int) {
	data := make([]byte, 0, len(pg.data)+len(keys)*64)
	starts := make([]int, 0, len(pg.recs)+len(keys))
	put := func(k string) {
		starts = append(starts, len(data))
		data = appendRecord(data, k, puts[k])
	}
	for i, r := range pg.recs {
		key := pg.key(i)
		for len(keys) > 0 && keys[0] < string(key) {
			put(keys[0])
			keys = keys[1:]
		}
		if len(keys) > 0 && keys[0] == string(key) {
			put(keys[0])
			keys = keys[1:]
			continue
		}
		starts = append(starts, len(data))
		data = append(data, pg.data[r.start:r.end+1]...)
	}
	for _, k := range keys {
		put(k)
	}
	return data, starts
}

// split writes the records data (starting at starts) to store as one
// page, or, when data is larger than twice the page size, as pages of
// about the page size cut between records.
func split(store Store, data []byte, starts []int) ([]Page, error) {
	n := 1
	if len(data) > 2*pageSize {
		n = (len(data) + pageSize/2) / pageSize
	}
	var pages []Page
	for a := 0; a < len(starts); {
		target := len(data) * (len(pages) + 1) / n
		b := a + 1
		for b < len(starts) && starts[b] < target {
			b++
		}
		end := len(data)
		if b < len(starts) {
			end = starts[b]
		}
		p, err := putPage(store, data[starts[a]:end], b-a)
		if err != nil {
			return nil, err
		}
		pages = append(pages, p)
		a = b
	}
	return pages, nil
}

// putPage writes the page data, which holds records records, to store.
func putPage(store Store, data []byte, records int) (Page, error) {
	sum := sha256.Sum256(data)
	p := Page{
		First:   string(data[:bytes.IndexByte(data, '\t')]),
		Digest:  hex.EncodeToString(sum[:]),
		Records: records,
	}
	if err := store.Put(p.Digest, data); err != nil {
		return Page{}, fmt.Errorf("pagetable: page with first key %q: %w", p.First, err)
	}
	return p, nil
}

func appendRecord(data []byte, key, value string) []byte {
	data = append(data, key...)
	data = append(data, '\t')
	data = append(data, value...)
	return append(data, '\n')
}

// checkRecord refuses a record the page format cannot hold.
func checkRecord(key, value string) error {
	switch {
	case key == "":
		return errors.New("pagetable: key is empty")
	case strings.ContainsAny(key, "\t\n"):
		return fmt.Errorf("pagetable: key %q holds a tab or newline", key)
	case strings.Contains(value, "\n"):
		return fmt.Errorf("pagetable: value of key %q holds a newline", key)
	}
	return nil
}

// Writer builds a table from records added in strictly increasing key
// order, cutting a page once it holds PageSize bytes or more and writing
// each page to its store as it is cut.
type Writer struct {
	store Store
	buf   []byte
	n     int    // records in buf
	last  string // the last key added
	pages []Page
	err   error // the first error, returned by every later call
}

// NewWriter returns a Writer of pages to store.
func NewWriter(store Store) *Writer { return &Writer{store: store, pages: []Page{}} }

// Add appends a record. A key not after the previous one, or a record the
// format cannot hold, is an error naming the key(s), and the record is
// not added; an error writing a page is returned by every later call.
func (w *Writer) Add(key, value string) error {
	if w.err != nil {
		return w.err
	}
	if err := checkRecord(key, value); err != nil {
		return err
	}
	if w.last != "" && key <= w.last {
		return fmt.Errorf("pagetable: key %q is not after the previous key %q", key, w.last)
	}
	if w.buf == nil {
		w.buf = make([]byte, 0, pageSize+pageSize/8)
	}
	w.buf = appendRecord(w.buf, key, value)
	w.n++
	w.last = key
	if len(w.buf) >= pageSize {
		return w.cut()
	}
	return nil
}

// cut writes the page in buf, if it holds any record.
func (w *Writer) cut() error {
	if w.n == 0 {
		return nil
	}
	p, err := putPage(w.store, w.buf, w.n)
	if err != nil {
		w.err = err
		return err
	}
	w.pages = append(w.pages, p)
	w.buf, w.n = nil, 0
	return nil
}

// Finish writes the last page and returns the page list: empty, not nil,
// when no record was added.
func (w *Writer) Finish() ([]Page, error) {
	if err := w.cut(); err != nil {
		return nil, err
	}
	return w.pages, nil
}

// floor returns the record of t with the greatest key not after key, and
// the key that follows it in t ("" when it is the last); ok is false
// when every key of t is after key.
func (t *Table) floor(key string) (k, v, next string, ok bool, err error) {
	i := sort.Search(len(t.pages), func(i int) bool { return t.pages[i].First > key }) - 1
	if i < 0 {
		return "", "", "", false, nil
	}
	pg, err := t.page(i)
	if err != nil {
		return "", "", "", false, err
	}
	j := pg.search(key)
	if j == len(pg.recs) || string(pg.key(j)) != key {
		j-- // the page's first key is not after key: j >= 0
	}
	switch {
	case j+1 < len(pg.recs):
		next = string(pg.key(j + 1))
	case i+1 < len(t.pages):
		next = t.pages[i+1].First
	}
	return string(pg.key(j)), string(pg.value(j)), next, true, nil
}

// firstBound is the index key of a tree's first data page: before every
// key a record may have (keys are not empty).
const firstBound = "\x00"

// Tree is a table whose page list is itself a table (its index): the
// caller signs the index's few pages (Root), not a list of every page,
// so what it signs and reads to find a page stays small however large
// the table grows. The index maps each data page's lower bound (its
// first key when it was cut; firstBound for the first page) to
// "<digest> <records> <first key>"; a data page holds the keys from its
// bound to the next page's. It is safe for concurrent use.
type Tree struct {
	index *Table
	store Store
	cache pageCache[string] // data pages by digest
}

// OpenTree checks the index's page list (as Open) and returns the tree;
// it reads no page.
func OpenTree(root []Page, store Store) (*Tree, error) {
	index, err := Open(root, store)
	if err != nil {
		return nil, err
	}
	return &Tree{index: index, store: store, cache: pageCache[string]{m: map[string]*page{}}}, nil
}

// Root returns a copy of the page list of the tree's index.
func (t *Tree) Root() []Page { return t.index.Pages() }

// dataPage is an index record decoded: the data page from bound to next.
type dataPage struct {
	bound, next string
	p           Page
}

func parseIndexRecord(bound, value, next string) (dataPage, error) {
	f := strings.SplitN(value, " ", 3)
	var records int
	if len(f) == 3 {
		_, err := fmt.Sscanf(f[1], "%d", &records)
		if err != nil || checkDigest(f[0]) != nil || records < 1 || f[2] < bound || next != "" && f[2] >= next {
			f = nil
		}
	}
	if len(f) != 3 {
		return dataPage{}, fmt.Errorf("%w: index record %q: %q is not a digest, a record count and a first key in the page's range", ErrCorrupt, bound, value)
	}
	return dataPage{bound: bound, next: next, p: Page{First: f[2], Digest: f[0], Records: records}}, nil
}

// Get returns the value of key, or ok false when the tree does not hold
// it. An index or data page that fails verification is an error wrapping
// ErrCorrupt; a page missing from the store is the store's error.
func (t *Tree) Get(key string) (value string, ok bool, err error) {
	bound, v, next, ok, err := t.index.floor(key)
	if err != nil || !ok {
		return "", false, err
	}
	dp, err := parseIndexRecord(bound, v, next)
	if err != nil || key < dp.p.First {
		return "", false, err
	}
	pg, err := t.data(dp)
	if err != nil {
		return "", false, err
	}
	value, ok = pg.get(key)
	return value, ok, nil
}

// data returns the data page dp names, verified, from the cache or the
// store.
func (t *Tree) data(dp dataPage) (*page, error) {
	if pg := t.cache.get(dp.p.Digest); pg != nil {
		return pg, nil
	}
	pg, err := load(t.store, dp.p, dp.next, "data page %q", dp.bound)
	if err != nil {
		return nil, err
	}
	return t.cache.put(dp.p.Digest, pg), nil
}

// dataPages returns every data page of the tree, reading the whole index
// (its few pages).
func (t *Tree) dataPages() ([]dataPage, error) {
	var out []dataPage
	for i := range t.index.pages {
		pg, err := t.index.page(i)
		if err != nil {
			return nil, err
		}
		for j := range pg.recs {
			next := ""
			switch {
			case j+1 < len(pg.recs):
				next = string(pg.key(j + 1))
			case i+1 < len(t.index.pages):
				next = t.index.pages[i+1].First
			}
			dp, err := parseIndexRecord(string(pg.key(j)), string(pg.value(j)), next)
			if err != nil {
				return nil, err
			}
			out = append(out, dp)
		}
	}
	return out, nil
}

// Digests returns the digest of every page of the tree, index and data.
func (t *Tree) Digests() ([]string, error) {
	dps, err := t.dataPages()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range t.index.pages {
		out = append(out, p.Digest)
	}
	for _, dp := range dps {
		out = append(out, dp.p.Digest)
	}
	return out, nil
}

// Update returns the root of t with puts merged in (as Table.Update):
// the data pages whose range receives a put are rewritten (split when
// larger than twice the page size, the first piece keeping the page's
// bound), the index records of the pages written are put into the index
// (Table.Update), and every other page is carried into dst. t is not
// modified.
func (t *Tree) Update(puts map[string]string, dst Store) ([]Page, error) {
	keys, err := sortedPuts(puts)
	if err != nil {
		return nil, err
	}
	dps, err := t.dataPages()
	if err != nil {
		return nil, err
	}
	if len(dps) == 0 {
		w := NewTreeWriter(dst)
		for _, k := range keys {
			if err := w.Add(k, puts[k]); err != nil {
				return nil, err
			}
		}
		return w.Finish()
	}
	index := map[string]string{}
	for i, dp := range dps {
		lo, hi := sort.SearchStrings(keys, dp.bound), len(keys)
		if i+1 < len(dps) {
			hi = sort.SearchStrings(keys, dps[i+1].bound)
		}
		if lo == hi {
			if err := Carry(dst, t.store, dp.p.Digest); err != nil {
				return nil, fmt.Errorf("pagetable: carrying data page %q: %w", dp.bound, err)
			}
			continue
		}
		pg, err := t.data(dp)
		if err != nil {
			return nil, err
		}
		data, starts := merge(pg, keys[lo:hi], puts)
		pages, err := split(dst, data, starts)
		if err != nil {
			return nil, err
		}
		for j, p := range pages {
			bound := p.First
			if j == 0 {
				bound = dp.bound
			}
			index[bound] = fmt.Sprintf("%s %d %s", p.Digest, p.Records, p.First)
		}
	}
	return t.index.Update(index, dst)
}

// TreeWriter builds a tree from records added in strictly increasing key
// order, as Writer builds a table, writing its index at Finish.
type TreeWriter struct {
	data  *Writer
	index *Writer
	done  int // data pages indexed
}

// NewTreeWriter returns a TreeWriter of pages to store.
func NewTreeWriter(store Store) *TreeWriter {
	return &TreeWriter{data: NewWriter(store), index: NewWriter(store)}
}

// Add appends a record (Writer.Add).
func (w *TreeWriter) Add(key, value string) error {
	if err := w.data.Add(key, value); err != nil {
		return err
	}
	return w.indexCut()
}

// indexCut adds to the index the data pages cut since the last call.
func (w *TreeWriter) indexCut() error {
	for ; w.done < len(w.data.pages); w.done++ {
		p := w.data.pages[w.done]
		bound := p.First
		if w.done == 0 {
			bound = firstBound
		}
		if err := w.index.Add(bound, fmt.Sprintf("%s %d %s", p.Digest, p.Records, p.First)); err != nil {
			return err
		}
	}
	return nil
}

// Finish writes the last data page and the index, and returns the
// index's page list, the tree's root: empty, not nil, when no record was
// added.
func (w *TreeWriter) Finish() ([]Page, error) {
	if _, err := w.data.Finish(); err != nil {
		return nil, err
	}
	if err := w.indexCut(); err != nil {
		return nil, err
	}
	return w.index.Finish()
}
