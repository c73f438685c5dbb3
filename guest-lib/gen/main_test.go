package main

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGeneratedUpToDate fails when guest-lib/generated/ differs from what
// the tables produce.
func TestGeneratedUpToDate(t *testing.T) {
	files, err := generate("../tables")
	if err != nil {
		t.Fatal(err)
	}
	if stale := checkDir("../generated", files); len(stale) > 0 {
		t.Fatalf("stale generated files, run `go run ./guest-lib/gen`: %v", stale)
	}
}

// TestTablesCoverABI checks that every symbol of ../shared/abi/*.exports.txt
// (beside the repository) has a row.
func TestTablesCoverABI(t *testing.T) {
	abi := filepath.Join("..", "..", "..", "shared", "abi")
	if _, err := os.Stat(abi); err != nil {
		t.Skipf("no ABI lists at %s: %v", abi, err)
	}
	for _, lib := range []string{"libcuda.so.1", "libnvidia-ml.so.1"} {
		data, err := os.ReadFile(filepath.Join("..", "tables", lib+".tbl"))
		if err != nil {
			t.Fatal(err)
		}
		tbl, err := parseTable(lib, data)
		if err != nil {
			t.Fatal(err)
		}
		rows := map[string]Row{}
		for _, r := range tbl.Rows {
			rows[r.Name] = r
		}
		f, err := os.Open(filepath.Join(abi, lib+".exports.txt"))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if line == "" || line == lib {
				continue
			}
			name, node, _ := strings.Cut(line, "@@")
			if node != "" {
				t.Errorf("%s: %s has version node %q: the driver libraries are unversioned", lib, name, node)
			}
			if _, ok := rows[name]; !ok {
				t.Errorf("%s: %s has no row", lib, name)
			}
		}
		f.Close()
	}
}

func TestParseTableRejects(t *testing.T) {
	for name, in := range map[string]string{
		"fields":    "a b c\n",
		"kind":      "a - weird 801\n",
		"default":   "a - hand x\n",
		"duplicate": "a - hand 1\na - hand 1\n",
		"name":      "a-b - hand 1\n",
		"node":      "a libcudart.so.13 hand 1\n",
	} {
		if _, err := parseTable("x", []byte(in)); err == nil {
			t.Errorf("%s: accepted %q", name, in)
		}
	}
}

// TestTableRows checks that no row is a void hand-written symbol (a void
// default only makes sense for a stub).
func TestTableRows(t *testing.T) {
	paths, err := filepath.Glob("../tables/*.tbl")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no tables: %v", err)
	}
	for _, p := range paths {
		if filepath.Base(p) == procaddrTable {
			continue
		}
		lib := strings.TrimSuffix(filepath.Base(p), ".tbl")
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		tbl, err := parseTable(lib, data)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range tbl.Rows {
			if r.Void && r.Hand {
				t.Errorf("%s:%d: %s: a void default only makes sense for a stub", lib, r.Line, r.Name)
			}
		}
	}
}
