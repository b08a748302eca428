package shard

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// storeGetCallers is every function of the package (outside tests) that
// calls the store's Get, and why it may. Only (*Reader).readSpan reads
// record bytes to answer a read; the others read what locates records
// (manifests, log entries, footers, filters) or serve the writer.
var storeGetCallers = map[string]string{
	// The read path: all of it runs under resolve (resolve.go).
	"read.(*Reader).readSpan":           "the one read of record bytes: every span of Get, BatchGet, Scan and follow",
	"read.(*Reader).fetch":              "the view's manifest read, conditional when cached (Reader.Manifest)",
	"shardlog.Source.Entry":             "the view's log probe after the checkpoint, and the writer's decision of a create: a log entry is read whole to learn its footer; its records are cached, never answered from there",
	"shardlog.Source.Index":             "a generation's footer index for the shared cache, put id checked; also the writer's id lookups",
	"shardlog.Source.Filter":            "a generation's id filter for the shared cache; also the writer's id lookups",
	"shardlog.Source.CorruptOrReplaced": "reads a blob whole only to tell a replaced log batch from a corrupt one after a failed check",
	"shardlog.ReadManifest":             "the write path: claims, checkpoints and deletes read the manifest unconditionally",
	"(*merger).readSource":              "the write path: a merge reads its sources whole to rewrite them",
}

// engineDirs are the shard engine's packages, by directory: this one and
// the floors under it. A function of another than this one is named with
// its package: shardlog.Source.Entry.
var engineDirs = []string{".", "read", "shardlog"}

// Only the read path's resolve reads record bytes. The test lists the
// functions of the engine's packages that call the store's Get and fails
// on one not in storeGetCallers, or on an entry nothing matches any more.
// It finds a store by name: every blob.Store of the engine is called
// store, which the test checks too, as it checks that no store is copied
// to another name.
func TestOnlyResolveReadsRecordBytes(t *testing.T) {
	callers := map[string][]string{}
	for _, dir := range engineDirs {
		in, err := storeGetCallersOf(dir)
		if err != nil {
			t.Fatal(err)
		}
		for name, where := range in {
			if dir != "." {
				name = filepath.Base(dir) + "." + name
			}
			callers[name] = where
		}
	}
	for name, where := range callers {
		if _, ok := storeGetCallers[name]; !ok {
			t.Errorf("%s calls the store's Get (%s): record bytes are read by (*Reader).readSpan, under resolve, only; "+
				"a read of anything else belongs in storeGetCallers with the reason", name, strings.Join(where, ", "))
		}
	}
	for name := range storeGetCallers {
		if _, ok := callers[name]; !ok {
			t.Errorf("storeGetCallers lists %s, which no longer calls the store's Get", name)
		}
	}
}

// storeGetCallersOf parses the package's non-test files in dir and maps
// each function that calls a store's Get to where.
func storeGetCallersOf(dir string) (map[string][]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	callers := map[string][]string{}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		f, err := parser.ParseFile(fset, path, src, 0)
		if err != nil {
			return nil, err
		}
		if err := checkStoreNames(fset, f); err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "Get" && isStore(sel.X) {
					name := funcName(fn)
					callers[name] = append(callers[name], fset.Position(sel.Pos()).String())
				}
				return true
			})
		}
	}
	return callers, nil
}

// isStore reports whether x names a store: store, or a field .store.
func isStore(x ast.Expr) bool {
	switch x := x.(type) {
	case *ast.Ident:
		return x.Name == "store"
	case *ast.SelectorExpr:
		return x.Sel.Name == "store"
	}
	return false
}

// checkStoreNames fails on a blob.Store declared under another name than
// store, or a store assigned to another name: the search above would miss
// its reads.
func checkStoreNames(fset *token.FileSet, f *ast.File) error {
	var bad []string
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Field:
			if isBlobStore(n.Type) && (len(n.Names) == 0 || slices.ContainsFunc(n.Names, func(id *ast.Ident) bool { return id.Name != "store" })) {
				bad = append(bad, fset.Position(n.Pos()).String())
			}
		case *ast.ValueSpec:
			if isBlobStore(n.Type) || slices.ContainsFunc(n.Values, isStore) {
				bad = append(bad, fset.Position(n.Pos()).String())
			}
		case *ast.AssignStmt:
			if slices.ContainsFunc(n.Rhs, isStore) {
				bad = append(bad, fset.Position(n.Pos()).String())
			}
		}
		return true
	})
	if bad != nil {
		return &storeNameError{bad}
	}
	return nil
}

type storeNameError struct{ at []string }

func (e *storeNameError) Error() string {
	return "a blob.Store is named other than store, or copied to another name, at " + strings.Join(e.at, ", ") +
		": TestOnlyResolveReadsRecordBytes finds a store's reads by that name"
}

func isBlobStore(x ast.Expr) bool {
	sel, ok := x.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && pkg.Name == "blob" && sel.Sel.Name == "Store"
}

// funcName is fn's name, with its receiver's type: (*Reader).readSpan.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	t := fn.Recv.List[0].Type
	if idx, ok := t.(*ast.IndexExpr); ok {
		t = idx.X
	}
	if star, ok := t.(*ast.StarExpr); ok {
		if id, ok := star.X.(*ast.Ident); ok {
			return "(*" + id.Name + ")." + fn.Name.Name
		}
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}
