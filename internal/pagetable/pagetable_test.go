package pagetable

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// setPageSize lowers the page size for one test, so that a few hundred
// records make many pages. Tests that call it do not run in parallel.
func setPageSize(t testing.TB, n int) {
	old := pageSize
	pageSize = n
	t.Cleanup(func() { pageSize = old })
}

// key is the key of record i; keys are ten apart so that key(i)+"5" lies
// between key(i) and key(i+1).
func key(i int) string { return fmt.Sprintf("k%08d", i*10) }

func value(i int) string { return fmt.Sprintf("value %d\twith a tab", i) }

// build writes records 0..n-1 to store and returns their page list.
func build(t testing.TB, store Store, n int) []Page {
	w := NewWriter(store)
	for i := range n {
		require.NoError(t, w.Add(key(i), value(i)))
	}
	pages, err := w.Finish()
	require.NoError(t, err)
	return pages
}

func digestOf(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// pageKeys returns the keys page p holds, read from store.
func pageKeys(t *testing.T, store Store, p Page) []string {
	data, err := store.Get(p.Digest)
	require.NoError(t, err)
	var keys []string
	for _, line := range strings.SplitAfter(string(data), "\n") {
		if k, _, ok := strings.Cut(line, "\t"); ok {
			keys = append(keys, k)
		}
	}
	return keys
}

func TestRoundTrip(t *testing.T) {
	const n = 100_000
	for _, tc := range []struct {
		name     string
		store    func(t *testing.T) Store
		pageSize int
	}{
		{"MemStore 4KiB pages", func(*testing.T) Store { return NewMemStore() }, 4 << 10},
		{"DirStore 32KiB pages", func(t *testing.T) Store {
			s, err := NewDirStore(filepath.Join(t.TempDir(), "pages"))
			require.NoError(t, err)
			return s
		}, 32 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setPageSize(t, tc.pageSize)
			store := tc.store(t)
			pages := build(t, store, n)
			require.Greater(t, len(pages), cacheSize, "the table must not fit the cache")
			total := 0
			for i, p := range pages {
				data, err := store.Get(p.Digest)
				require.NoError(t, err)
				if i < len(pages)-1 {
					assert.GreaterOrEqual(t, len(data), tc.pageSize, "page %d", i)
				}
				assert.Less(t, len(data), tc.pageSize+100, "page %d", i)
				total += p.Records
			}
			require.Equal(t, n, total)

			tab, err := Open(pages, store)
			require.NoError(t, err)
			// Every key in order (each page read once), then 10^4 at
			// random (most miss the cache).
			order := make([]int, n, n+n/10)
			for i := range n {
				order[i] = i
			}
			rng := rand.New(rand.NewPCG(1, 2))
			for range n / 10 {
				order = append(order, rng.IntN(n))
			}
			for _, i := range order {
				v, ok, err := tab.Get(key(i))
				require.NoError(t, err, key(i))
				require.True(t, ok, key(i))
				require.Equal(t, value(i), v)
			}
			for _, absent := range []string{"a", "k", key(0)[:8], key(0) + "5", key(n/2) + "5", key(n-1) + "5", "z"} {
				v, ok, err := tab.Get(absent)
				require.NoError(t, err, absent)
				assert.False(t, ok, absent)
				assert.Empty(t, v, absent)
			}
		})
	}
}

func TestUpdate(t *testing.T) {
	const n = 400
	between := map[string]string{}
	for i := range 200 {
		between[fmt.Sprintf("%s5%04d", key(100), i)] = strings.Repeat("x", 40)
	}
	for _, tc := range []struct {
		name      string
		puts      map[string]string
		gone, new int    // digests of the old list not in the new one, and the reverse; new < 0: at least 2
		first     string // the new list's first key, when it changes
	}{
		{name: "no puts", puts: map[string]string{}},
		{name: "replace", puts: map[string]string{key(100): "replaced"}, gone: 1, new: 1},
		{name: "same value", puts: map[string]string{key(100): value(100)}},
		{name: "insert in the middle", puts: map[string]string{key(100) + "5": "new"}, gone: 1, new: 1},
		{name: "before the first key", puts: map[string]string{"a": "new"}, gone: 1, new: 1, first: "a"},
		{name: "after the last key", puts: map[string]string{"z": "new"}, gone: 1, new: 1},
		{name: "three pages", puts: map[string]string{key(10): "a", key(11): "b", key(200) + "5": "c", key(n - 1): "d"}, gone: 3, new: 3},
		{name: "split", puts: between, gone: 1, new: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setPageSize(t, 1<<10)
			store := NewMemStore()
			pages := build(t, store, n)
			old, err := Open(pages, store)
			require.NoError(t, err)

			got, err := old.Update(tc.puts, store)
			require.NoError(t, err)

			oldSet, newSet := map[string]bool{}, map[string]bool{}
			for _, p := range pages {
				oldSet[p.Digest] = true
			}
			for _, p := range got {
				newSet[p.Digest] = true
			}
			gone, added := 0, 0
			for d := range oldSet {
				if !newSet[d] {
					gone++
				}
			}
			for d := range newSet {
				if !oldSet[d] {
					added++
				}
			}
			assert.Equal(t, tc.gone, gone, "old pages rewritten")
			if tc.new < 0 {
				assert.GreaterOrEqual(t, added, 2, "new pages")
			} else {
				assert.Equal(t, tc.new, added, "new pages")
			}
			if tc.first != "" {
				assert.Equal(t, tc.first, got[0].First)
			}

			tab, err := Open(got, store)
			require.NoError(t, err)
			base, want := map[string]string{}, map[string]string{}
			for i := range n {
				base[key(i)] = value(i)
				want[key(i)] = value(i)
			}
			for k, v := range tc.puts {
				want[k] = v
			}
			records := 0
			for _, p := range got {
				records += p.Records
				data, err := store.Get(p.Digest)
				require.NoError(t, err)
				assert.LessOrEqual(t, len(data), 2*pageSize, "page %q", p.First)
				if tc.new < 0 && !oldSet[p.Digest] {
					assert.GreaterOrEqual(t, len(data), pageSize/2, "split page %q", p.First)
				}
			}
			assert.Equal(t, len(want), records)
			for k, v := range want {
				gotV, ok, err := tab.Get(k)
				require.NoError(t, err, k)
				require.True(t, ok, k)
				require.Equal(t, v, gotV, k)
			}

			// The old table is untouched.
			assert.Equal(t, pages, old.Pages())
			for i := range n {
				v, ok, err := old.Get(key(i))
				require.NoError(t, err)
				require.True(t, ok)
				require.Equal(t, value(i), v)
			}
			for k := range tc.puts {
				if _, ok := base[k]; !ok {
					_, ok, err := old.Get(k)
					require.NoError(t, err)
					assert.False(t, ok, "the old table holds %q", k)
				}
			}
		})
	}
}

func TestUpdateEmptyTable(t *testing.T) {
	setPageSize(t, 1<<10)
	tab, err := Open(nil, NewMemStore())
	require.NoError(t, err)
	v, ok, err := tab.Get("a")
	require.NoError(t, err)
	assert.False(t, ok)
	assert.Empty(t, v)

	puts := map[string]string{}
	for i := range 100 {
		puts[key(i)] = value(i)
	}
	dst := NewMemStore()
	got, err := tab.Update(puts, dst)
	require.NoError(t, err)
	assert.Equal(t, build(t, NewMemStore(), 100), got, "the pages Writer makes")

	none, err := tab.Update(nil, dst)
	require.NoError(t, err)
	assert.Equal(t, []Page{}, none)
}

// TestUpdateIntoAnotherDir writes a new version into a second DirStore:
// the unchanged pages are hard links to the first store's files, and the
// new table reads from the second store alone.
func TestUpdateIntoAnotherDir(t *testing.T) {
	setPageSize(t, 1<<10)
	src, err := NewDirStore(filepath.Join(t.TempDir(), "v1"))
	require.NoError(t, err)
	dst, err := NewDirStore(filepath.Join(t.TempDir(), "v2"))
	require.NoError(t, err)
	pages := build(t, src, 300)
	old, err := Open(pages, src)
	require.NoError(t, err)

	got, err := old.Update(map[string]string{key(150): "new"}, dst)
	require.NoError(t, err)
	require.Len(t, got, len(pages))
	changed := 0
	for i, p := range got {
		after, err := os.Stat(filepath.Join(dst.Dir, p.Digest))
		require.NoError(t, err)
		before, err := os.Stat(filepath.Join(src.Dir, pages[i].Digest))
		require.NoError(t, err)
		if p.Digest != pages[i].Digest {
			changed++
			assert.False(t, os.SameFile(before, after))
		} else {
			assert.True(t, os.SameFile(before, after), "page %d is not a hard link", i)
		}
	}
	assert.Equal(t, 1, changed)

	tab, err := Open(got, dst)
	require.NoError(t, err)
	for i := range 300 {
		want := value(i)
		if i == 150 {
			want = "new"
		}
		v, ok, err := tab.Get(key(i))
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, want, v)
	}
}

func TestUpdateRejects(t *testing.T) {
	store := NewMemStore()
	tab, err := Open(build(t, store, 10), store)
	require.NoError(t, err)
	for _, tc := range []struct {
		key, value, want string
	}{
		{"", "v", "key is empty"},
		{"a\tb", "v", `key "a\tb" holds a tab`},
		{"a\nb", "v", `key "a\nb" holds a tab or newline`},
		{"a", "v\n", `value of key "a" holds a newline`},
	} {
		_, err := tab.Update(map[string]string{tc.key: tc.value, "ok": "v"}, store)
		require.ErrorContains(t, err, tc.want)
	}
}

func TestWriterRejects(t *testing.T) {
	w := NewWriter(NewMemStore())
	require.NoError(t, w.Add("b", "v"))
	for _, tc := range []struct {
		key, value, want string
	}{
		{"a", "v", `key "a" is not after the previous key "b"`},
		{"b", "v", `key "b" is not after the previous key "b"`},
		{"", "v", "key is empty"},
		{"c\td", "v", `key "c\td" holds a tab or newline`},
		{"c\nd", "v", `key "c\nd" holds a tab or newline`},
		{"c", "v\n", `value of key "c" holds a newline`},
	} {
		assert.ErrorContains(t, w.Add(tc.key, tc.value), tc.want)
	}
	require.NoError(t, w.Add("c", "a value\twith a tab"), "a rejected record is not added")
	pages, err := w.Finish()
	require.NoError(t, err)
	require.Len(t, pages, 1)
	assert.Equal(t, Page{First: "b", Digest: digestOf([]byte("b\tv\nc\ta value\twith a tab\n")), Records: 2}, pages[0])
}

func TestOpenRejects(t *testing.T) {
	d := func(c string) string { return strings.Repeat(c, 64) }
	for _, tc := range []struct {
		name  string
		pages []Page
		want  string
	}{
		{"unsorted", []Page{{"b", d("a"), 1}, {"a", d("b"), 1}}, `listing page 1 (first "a"): first key is not after page 0's "b"`},
		{"duplicate first", []Page{{"a", d("a"), 1}, {"a", d("b"), 1}}, "listing page 1"},
		{"empty first", []Page{{"", d("a"), 1}}, "listing page 0 (first \"\"): first key is empty"},
		{"short digest", []Page{{"a", d("a"), 1}, {"b", d("a")[1:], 1}}, "listing page 1"},
		{"uppercase digest", []Page{{"a", d("A"), 1}}, "is not 64 lowercase hex digits"},
		{"non-hex digest", []Page{{"a", d("g"), 1}}, "is not 64 lowercase hex digits"},
		{"no records", []Page{{"a", d("a"), 0}}, "records is 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(tc.pages, NewMemStore())
			require.ErrorIs(t, err, ErrCorrupt)
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

// TestCorrupt breaks page 1 of a table in a DirStore, on disk or in the
// listing: every Get that reads it fails with ErrCorrupt, naming the
// page and what failed, and returns no value.
func TestCorrupt(t *testing.T) {
	// rewrite stores data as page 1 under its own digest.
	rewrite := func(t *testing.T, s *DirStore, pages []Page, data []byte, records int) []Page {
		require.NoError(t, s.Put(digestOf(data), data))
		pages[1].Digest, pages[1].Records = digestOf(data), records
		return pages
	}
	for _, tc := range []struct {
		name    string
		corrupt func(t *testing.T, s *DirStore, pages []Page, data []byte) []Page
		want    string
	}{
		{"byte flipped on disk", func(t *testing.T, s *DirStore, pages []Page, data []byte) []Page {
			data[len(data)/2] ^= 1
			require.NoError(t, os.WriteFile(filepath.Join(s.Dir, pages[1].Digest), data, 0o600))
			return pages
		}, "its bytes hash to"},
		{"file swapped for another page", func(t *testing.T, s *DirStore, pages []Page, _ []byte) []Page {
			other, err := s.Get(pages[2].Digest)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(s.Dir, pages[1].Digest), other, 0o600))
			return pages
		}, "its bytes hash to"},
		{"listing names another page", func(t *testing.T, s *DirStore, pages []Page, _ []byte) []Page {
			pages[1].Digest, pages[1].Records = pages[2].Digest, pages[2].Records
			return pages
		}, "its first key is"},
		{"records one more", func(t *testing.T, s *DirStore, pages []Page, _ []byte) []Page {
			pages[1].Records++
			return pages
		}, "records, not"},
		{"records one fewer", func(t *testing.T, s *DirStore, pages []Page, _ []byte) []Page {
			pages[1].Records--
			return pages
		}, "it holds more than"},
		{"first is before the first key", func(t *testing.T, s *DirStore, pages []Page, _ []byte) []Page {
			pages[1].First = pages[1].First[:len(pages[1].First)-1]
			return pages
		}, "its first key is"},
		{"first is after the first key", func(t *testing.T, s *DirStore, pages []Page, _ []byte) []Page {
			pages[1].First += "0"
			return pages
		}, "its first key is"},
		{"records out of order", func(t *testing.T, s *DirStore, pages []Page, data []byte) []Page {
			lines := strings.SplitAfter(string(data), "\n")
			lines[2], lines[3] = lines[3], lines[2]
			return rewrite(t, s, pages, []byte(strings.Join(lines, "")), pages[1].Records)
		}, "of record 3 is not after"},
		{"key in the next page's range", func(t *testing.T, s *DirStore, pages []Page, data []byte) []Page {
			data = append(data, pages[2].First+"\tstolen\n"...)
			return rewrite(t, s, pages, data, pages[1].Records+1)
		}, "is not before the next page's first key"},
		{"no final newline", func(t *testing.T, s *DirStore, pages []Page, data []byte) []Page {
			return rewrite(t, s, pages, data[:len(data)-1], pages[1].Records)
		}, "has no newline"},
		{"record without a tab", func(t *testing.T, s *DirStore, pages []Page, data []byte) []Page {
			lines := strings.SplitAfter(string(data), "\n")
			lines[1] = strings.ReplaceAll(lines[1], "\t", " ")
			return rewrite(t, s, pages, []byte(strings.Join(lines, "")), pages[1].Records)
		}, "record 1 has no tab"},
		{"empty page", func(t *testing.T, s *DirStore, pages []Page, _ []byte) []Page {
			return rewrite(t, s, pages, []byte{}, pages[1].Records)
		}, "it holds 0 records"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setPageSize(t, 1<<10)
			s, err := NewDirStore(t.TempDir())
			require.NoError(t, err)
			pages := build(t, s, 200)
			require.Greater(t, len(pages), 3)
			keys := pageKeys(t, s, pages[1])
			data, err := s.Get(pages[1].Digest)
			require.NoError(t, err)
			tab, err := Open(tc.corrupt(t, s, slices.Clone(pages), data), s)
			require.NoError(t, err)

			for _, k := range keys {
				v, ok, err := tab.Get(k)
				assert.False(t, ok, "a value of %q from a bad page", k)
				assert.Empty(t, v, k)
				if k != keys[0] { // the listing may place the first key in page 0
					require.ErrorIs(t, err, ErrCorrupt, k)
					require.ErrorContains(t, err, fmt.Sprintf("page 1 (first %q)", tab.Pages()[1].First))
					require.ErrorContains(t, err, tc.want)
				}
			}
			v, ok, err := tab.Get(key(0))
			require.NoError(t, err, "page 0 is sound")
			assert.True(t, ok)
			assert.Equal(t, value(0), v)
		})
	}
}

// TestConcurrentGet reads a table of many more pages than the cache
// holds from several goroutines (run with -race).
func TestConcurrentGet(t *testing.T) {
	setPageSize(t, 1<<10)
	store := NewMemStore()
	tab, err := Open(build(t, store, 10_000), store)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 0))
			for range 2000 {
				i := rng.IntN(10_000)
				v, ok, err := tab.Get(key(i))
				if !assert.NoError(t, err) || !assert.True(t, ok) || !assert.Equal(t, value(i), v) {
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestMissingPage(t *testing.T) {
	setPageSize(t, 1<<10)
	s, err := NewDirStore(t.TempDir())
	require.NoError(t, err)
	pages := build(t, s, 200)
	keys := pageKeys(t, s, pages[1])
	require.NoError(t, os.Remove(filepath.Join(s.Dir, pages[1].Digest)))
	tab, err := Open(pages, s)
	require.NoError(t, err)
	v, ok, err := tab.Get(keys[1])
	require.ErrorIs(t, err, os.ErrNotExist)
	assert.NotErrorIs(t, err, ErrCorrupt)
	assert.ErrorContains(t, err, fmt.Sprintf("page 1 (first %q", pages[1].First))
	assert.False(t, ok)
	assert.Empty(t, v)
}

func TestDirStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "pages")
	s, err := NewDirStore(dir)
	require.NoError(t, err)
	info, err := os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), info.Mode().Perm())

	data := []byte("k\tv\n")
	d := digestOf(data)
	_, err = s.Get(d)
	require.ErrorIs(t, err, os.ErrNotExist)
	require.NoError(t, s.Put(d, data))
	info, err = os.Stat(filepath.Join(dir, d))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	got, err := s.Get(d)
	require.NoError(t, err)
	assert.Equal(t, data, got)

	require.NoError(t, s.Put(d, []byte("other")), "a second Put of a digest does nothing")
	again, err := os.Stat(filepath.Join(dir, d))
	require.NoError(t, err)
	assert.True(t, os.SameFile(info, again))
	got, err = s.Get(d)
	require.NoError(t, err)
	assert.Equal(t, data, got)

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file is left")

	for _, bad := range []string{"../" + d[3:], strings.ToUpper(d), d[1:], ""} {
		_, err := s.Get(bad)
		assert.ErrorContains(t, err, "is not 64 lowercase hex digits")
		assert.ErrorContains(t, s.Put(bad, data), "is not 64 lowercase hex digits")
	}
}

func TestMemStore(t *testing.T) {
	s := NewMemStore()
	_, err := s.Get(strings.Repeat("0", 64))
	require.ErrorIs(t, err, os.ErrNotExist)

	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				data := []byte(fmt.Sprintf("%d\t%d\n", i, g%2))
				assert.NoError(t, s.Put(digestOf(data), data))
				got, err := s.Get(digestOf(data))
				assert.NoError(t, err)
				assert.Equal(t, data, got)
			}
		})
	}
	wg.Wait()

	data := []byte("k\tv\n")
	require.NoError(t, s.Put(digestOf(data), data))
	data[0] = 'x'
	got, err := s.Get(digestOf([]byte("k\tv\n")))
	require.NoError(t, err)
	got[1] = 'x'
	again, err := s.Get(digestOf([]byte("k\tv\n")))
	require.NoError(t, err)
	assert.Equal(t, []byte("k\tv\n"), again, "the store keeps its own copy")
}

func TestCarry(t *testing.T) {
	data := []byte("k\tv\n")
	d := digestOf(data)
	dirStore := func(t *testing.T) *DirStore {
		s, err := NewDirStore(filepath.Join(t.TempDir(), "pages"))
		require.NoError(t, err)
		return s
	}
	same := func(t *testing.T, a, b *DirStore) bool {
		ai, err := os.Stat(filepath.Join(a.Dir, d))
		require.NoError(t, err)
		bi, err := os.Stat(filepath.Join(b.Dir, d))
		require.NoError(t, err)
		return os.SameFile(ai, bi)
	}

	t.Run("DirStore to DirStore links", func(t *testing.T) {
		src, dst := dirStore(t), dirStore(t)
		require.NoError(t, src.Put(d, data))
		require.NoError(t, Carry(dst, src, d))
		assert.True(t, same(t, src, dst))
	})
	t.Run("copies when linking fails", func(t *testing.T) {
		link = func(string, string) error { return &os.LinkError{Op: "link", Err: syscall.EXDEV} }
		t.Cleanup(func() { link = os.Link })
		src, dst := dirStore(t), dirStore(t)
		require.NoError(t, src.Put(d, data))
		require.NoError(t, Carry(dst, src, d))
		assert.False(t, same(t, src, dst))
		got, err := dst.Get(d)
		require.NoError(t, err)
		assert.Equal(t, data, got)
	})
	t.Run("the destination holds the page", func(t *testing.T) {
		src, dst := dirStore(t), dirStore(t)
		require.NoError(t, src.Put(d, data))
		require.NoError(t, dst.Put(d, data))
		require.NoError(t, Carry(dst, src, d))
		assert.False(t, same(t, src, dst))
	})
	t.Run("between kinds of store", func(t *testing.T) {
		mem, dir, mem2 := NewMemStore(), dirStore(t), NewMemStore()
		require.NoError(t, mem.Put(d, data))
		require.NoError(t, Carry(dir, mem, d))
		require.NoError(t, Carry(mem2, dir, d))
		got, err := mem2.Get(d)
		require.NoError(t, err)
		assert.Equal(t, data, got)
	})
	t.Run("same store", func(t *testing.T) {
		mem, dir := NewMemStore(), dirStore(t)
		require.NoError(t, Carry(mem, mem, d), "a no-op, though the page is absent")
		require.NoError(t, Carry(dir, &DirStore{Dir: dir.Dir + "/./"}, d))
	})
	t.Run("missing page", func(t *testing.T) {
		require.ErrorIs(t, Carry(dirStore(t), dirStore(t), d), os.ErrNotExist)
		require.ErrorIs(t, Carry(NewMemStore(), NewMemStore(), d), os.ErrNotExist)
	})
}

// FuzzDecode checks that a page decode accepts is sound: the listing it
// is checked against is taken from the bytes themselves, and every
// record of an accepted page is found by search.
func FuzzDecode(f *testing.F) {
	f.Add([]byte("a\t1\nb\t2\n"), "")
	f.Add([]byte("a\t1\nb\t2\n"), "b")
	f.Add([]byte("b\t1\na\t2\n"), "")
	f.Add([]byte("a\t\t\n\t\n"), "")
	f.Add([]byte("a\t1"), "z")
	f.Fuzz(func(t *testing.T, data []byte, next string) {
		first, _, _ := bytes.Cut(data, []byte("\t"))
		p := Page{First: string(first), Digest: digestOf(data), Records: max(1, bytes.Count(data, []byte("\n")))}
		pg, err := decode(data, p, next)
		if err != nil {
			return
		}
		require.Len(t, pg.recs, p.Records)
		for i := range pg.recs {
			k := string(pg.key(i))
			require.NotEmpty(t, k)
			require.NotContains(t, k, "\n")
			require.NotContains(t, string(pg.value(i)), "\n")
			if next != "" {
				require.Less(t, k, next)
			}
			require.Equal(t, i, pg.search(k))
		}
	})
}

// benchTable is a table of 10^6 records of 100 bytes in a MemStore,
// built once for the benchmarks.
var benchTable = sync.OnceValues(func() (*Table, *MemStore) {
	store := NewMemStore()
	w := NewWriter(store)
	pad := strings.Repeat("v", 78)
	for i := range 1_000_000 {
		if err := w.Add(key(i), fmt.Sprintf("%s%08d", pad, i)); err != nil {
			panic(err)
		}
	}
	pages, err := w.Finish()
	if err != nil {
		panic(err)
	}
	tab, err := Open(pages, store)
	if err != nil {
		panic(err)
	}
	return tab, store
})

func BenchmarkGet(b *testing.B) {
	tab, _ := benchTable()
	pages := tab.Pages()
	b.Run("cached", func(b *testing.B) {
		keys := make([]string, 1000) // all in page 0
		for i := range keys {
			keys[i] = key(i)
		}
		tab.Get(keys[0])
		for i := 0; b.Loop(); i++ {
			if _, ok, err := tab.Get(keys[i%len(keys)]); !ok || err != nil {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("uncached", func(b *testing.B) {
		// Visiting the pages in turn, each Get misses the cache of 32.
		for i := 0; b.Loop(); i++ {
			if _, ok, err := tab.Get(pages[i%len(pages)].First); !ok || err != nil {
				b.Fatal(ok, err)
			}
		}
	})
}

// BenchmarkUpdate puts 10 keys, 5 replaced and 5 inserted at random, into
// the table of 10^6 records, writing to its own store.
func BenchmarkUpdate(b *testing.B) {
	tab, store := benchTable()
	old := map[string]bool{}
	for _, p := range tab.Pages() {
		old[p.Digest] = true
	}
	rng := rand.New(rand.NewPCG(3, 4))
	written := 0
	for b.Loop() {
		puts := map[string]string{}
		for j := range 10 {
			k := key(rng.IntN(1_000_000))
			if j%2 == 1 {
				k += "5"
			}
			puts[k] = "updated"
		}
		pages, err := tab.Update(puts, store)
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range pages {
			if !old[p.Digest] {
				written++
			}
		}
	}
	b.ReportMetric(float64(written)/float64(b.N), "pages/op")
}
