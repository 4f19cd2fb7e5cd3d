// Command codecount counts, per Go package under a root: methods per receiver
// type (non-test files), constructor (New*/new*) lengths in lines, and the
// imports of the module's own packages from one folder: the figures
// the house is held to (no type over 30 methods, no constructor over 40
// lines). go run ./scripts/codecount -top 10
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

type typeKey struct{ pkg, typ string }

func main() {
	root := flag.String("root", ".", "module root")
	module := flag.String("module", "github.com/kvrouter/kvrouter", "module path")
	dir := flag.String("imports", "proxy", "folder whose project imports are listed (recursively)")
	top := flag.Int("top", 10, "types listed")
	flag.Parse()

	fset := token.NewFileSet()
	methods := map[typeKey]int{}
	files := map[typeKey]map[string]bool{}
	type ctor struct {
		where string
		lines int
	}
	var ctors []ctor
	importsByPkg := map[string]int{}
	importLines := 0
	importLinesTest := 0
	filepath.Walk(*root, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		if info.IsDir() {
			n := info.Name()
			if path != *root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "vendor" || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(*root, path)
		pkgDir := filepath.Dir(rel)
		isTest := strings.HasSuffix(path, "_test.go")
		if pkgDir == *dir || strings.HasPrefix(pkgDir, *dir+"/") {
			for _, im := range f.Imports {
				p := strings.Trim(im.Path.Value, `"`)
				if strings.HasPrefix(p, *module+"/") {
					if isTest {
						importLinesTest++
					} else {
						importLines++
						importsByPkg[pkgDir+" -> "+strings.TrimPrefix(p, *module+"/")]++
					}
				}
			}
		}
		if isTest {
			return nil
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			if fd.Recv != nil && len(fd.Recv.List) == 1 {
				t := fd.Recv.List[0].Type
				if s, ok := t.(*ast.StarExpr); ok {
					t = s.X
				}
				if ix, ok := t.(*ast.IndexExpr); ok {
					t = ix.X
				}
				if ix, ok := t.(*ast.IndexListExpr); ok {
					t = ix.X
				}
				if id, ok := t.(*ast.Ident); ok {
					k := typeKey{pkgDir, id.Name}
					methods[k]++
					if files[k] == nil {
						files[k] = map[string]bool{}
					}
					files[k][filepath.Base(path)] = true
				}
				continue
			}
			n := fd.Name.Name
			if strings.HasPrefix(n, "New") || (strings.HasPrefix(n, "new") && len(n) > 3 && n[3] >= 'A' && n[3] <= 'Z') || n == "new" {
				lines := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
				ctors = append(ctors, ctor{rel + ":" + n, lines})
			}
		}
		return nil
	})
	type row struct {
		k        typeKey
		n, files int
	}
	var rows []row
	for k, n := range methods {
		rows = append(rows, row{k, n, len(files[k])})
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].n != rows[j].n {
			return rows[i].n > rows[j].n
		}
		return rows[i].k.pkg+rows[i].k.typ < rows[j].k.pkg+rows[j].k.typ
	})
	fmt.Printf("== methods per type (top %d, non-test files)\n", *top)
	for i, r := range rows {
		if i >= *top {
			break
		}
		fmt.Printf("%4d methods  %2d files  %s.%s\n", r.n, r.files, r.k.pkg, r.k.typ)
	}
	fmt.Printf("== types over 30 methods:")
	over := 0
	for _, r := range rows {
		if r.n > 30 {
			fmt.Printf(" %s.%s(%d)", r.k.pkg, r.k.typ, r.n)
			over++
		}
	}
	fmt.Printf(" [%d]\n", over)
	sort.Slice(ctors, func(i, j int) bool { return ctors[i].lines > ctors[j].lines })
	fmt.Println("== constructors over 40 lines")
	for _, c := range ctors {
		if c.lines <= 40 {
			break
		}
		fmt.Printf("%4d lines  %s\n", c.lines, c.where)
	}
	for _, c := range ctors {
		if strings.HasSuffix(c.where, ":New") && strings.HasPrefix(c.where, *dir+"/") {
			fmt.Printf("   (%s: %d lines)\n", c.where, c.lines)
		}
	}
	fmt.Printf("== %s/ imports of the module's packages: %d in non-test files, %d in tests, %d total\n", *dir, importLines, importLinesTest, importLines+importLinesTest)
	var ks []string
	for k := range importsByPkg {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	for _, k := range ks {
		fmt.Printf("%4d  %s\n", importsByPkg[k], k)
	}
}
