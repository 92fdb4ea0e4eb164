package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// fieldKind is the JSON type a zap field constructor writes with the
// service's encoder (durations as strings, "3.2s").
func fieldKind(ctor string) string {
	switch {
	case ctor == "Any" || ctor == "Reflect" || ctor == "Object" || ctor == "Inline":
		return "any"
	case strings.HasSuffix(ctor, "s") || ctor == "Array":
		return "array" // Strings, Int64s, Ints, Errors, ...
	case strings.HasPrefix(ctor, "Int"), strings.HasPrefix(ctor, "Uint"), strings.HasPrefix(ctor, "Float"):
		return "number"
	case ctor == "Bool":
		return "bool"
	default: // String, Stringer, ByteString, Duration, Time, NamedError, Stack
		return "string"
	}
}

// TestLogFieldsHaveOneTypePerName holds the service's log lines to README's
// promise: a field name has one JSON type in every line, so a typed log
// store (Elasticsearch's dynamic mapping) maps it once and refuses none.
// "window" was a duration in the start line, the window_id (a number) in
// the handler's and a stream entry id (a string) in the worker's. The
// client package (the caller's process) and the commands, which log
// elsewhere, are not the service's.
func TestLogFieldsHaveOneTypePerName(t *testing.T) {
	type use struct{ kind, where string }
	seen := map[string][]use{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch path {
			case "client", "cmd", "kitex_gen", "docs", "deploy", "faultinject":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "zap" {
				return true
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			name, err := strconv.Unquote(lit.Value)
			if err != nil || sel.Sel.Name == "New" || strings.HasPrefix(sel.Sel.Name, "New") {
				return true
			}
			seen[name] = append(seen[name], use{fieldKind(sel.Sel.Name), fset.Position(lit.Pos()).String()})
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen["shard"]) == 0 || len(seen["activity"]) == 0 {
		t.Fatalf("found no zap fields named shard or activity: the walk missed the service's code (%d names)", len(seen))
	}
	names := make([]string, 0, len(seen))
	for name := range seen {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		uses := seen[name]
		for _, u := range uses[1:] {
			if u.kind != uses[0].kind {
				t.Errorf("log field %q is a %s at %s and a %s at %s", name, uses[0].kind, uses[0].where, u.kind, u.where)
				break
			}
		}
	}
}
