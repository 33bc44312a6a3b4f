// Package durcheck is a static check (a go/analysis Analyzer) for the one
// class of dropped error that loses data: the error of an fsync, of a
// directory sync, or of the Close of a file the function opened for
// writing. Such an error is the only sign that written bytes may not be
// on disk; code that drops it goes on to mark data durable that is not.
//
// It reports, anywhere in non-test code:
//
//   - a call of (*os.File).Sync, unix.Fsync, unix.Fdatasync, unix.Msync,
//     unix.SyncFileRange, or a Sync* function of internal/fsutil (SyncDir)
//     whose error is not used: a bare statement, a defer or go statement,
//     or an assignment of the error to _;
//   - a call of Close on an *os.File variable that the same function
//     assigned from os.Create, os.CreateTemp or os.OpenFile with a write
//     flag (O_WRONLY, O_RDWR, O_APPEND, O_CREATE, O_TRUNC; a flag that is
//     not a constant counts as one), as a bare statement or a defer or go
//     statement. An explicit `_ = f.Close()` is accepted there: on an error
//     path, after the write already failed, the Close error adds nothing.
//
// A deferred closure that closes a file its enclosing function opened is
// checked too; `var f, err = os.Create(...)` counts as an opening.
//
// errcheck reports every dropped error (several hundred in this tree,
// most of them Fprintf to a terminal and the Close of a read-only file or
// a socket); this check reports only these, and make vet requires none.
// Files reached through struct fields are not tracked: the check is by
// local variable.
package durcheck

import (
	"go/ast"
	"go/constant"
	"go/types"
	"maps"
	"os"
	"strings"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/passes/inspect"
	"golang.org/x/tools/go/ast/inspector"
)

// Analyzer reports dropped errors of syncs and of closes of written files.
var Analyzer = &analysis.Analyzer{
	Name:     "durcheck",
	Doc:      "report dropped errors of fsync, directory syncs and Close of files opened for writing",
	Requires: []*analysis.Analyzer{inspect.Analyzer},
	Run:      run,
}

// writeFlags are the os.OpenFile flags that open a file for writing.
const writeFlags = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREATE | os.O_TRUNC

func run(pass *analysis.Pass) (any, error) {
	ins := pass.ResultOf[inspect.Analyzer].(*inspector.Inspector)
	ins.Preorder([]ast.Node{(*ast.FuncDecl)(nil)}, func(n ast.Node) {
		fd := n.(*ast.FuncDecl)
		if fd.Body == nil || strings.HasSuffix(pass.Fset.Position(fd.Pos()).Filename, "_test.go") {
			return
		}
		checkBody(pass, fd.Body, nil)
	})
	return nil, nil
}

// checkBody checks one function body. outer are the written files of the
// functions it is nested in: a function literal (a deferred closure)
// closing one of them is checked as its opener would be.
func checkBody(pass *analysis.Pass, body *ast.BlockStmt, outer map[types.Object]bool) {
	written := maps.Clone(outer)
	if written == nil {
		written = map[types.Object]bool{}
	}
	opened := func(lhs []*ast.Ident, rhs []ast.Expr) {
		for i, r := range rhs {
			call, ok := ast.Unparen(r).(*ast.CallExpr)
			if !ok || i >= len(lhs) || lhs[i] == nil || !opensForWrite(pass, call) {
				continue
			}
			if obj := pass.TypesInfo.ObjectOf(lhs[i]); obj != nil {
				written[obj] = true
			}
		}
	}
	ast.Inspect(body, func(n ast.Node) bool {
		switch s := n.(type) {
		case *ast.AssignStmt:
			ids := make([]*ast.Ident, len(s.Lhs))
			for i, l := range s.Lhs {
				ids[i], _ = l.(*ast.Ident)
			}
			opened(ids, s.Rhs)
		case *ast.ValueSpec:
			opened(s.Names, s.Values)
		case *ast.FuncLit:
			return false // checked below, with what is known by then
		}
		return true
	})
	report := func(call *ast.CallExpr, how string, blankOK bool) {
		if isSync(pass, call) {
			pass.Reportf(call.Pos(), "the error of %s is %s: a failed sync means the data may not be on disk", render(call), how)
			return
		}
		if !blankOK && closesWritten(pass, call, written) {
			pass.Reportf(call.Pos(), "the error of %s is %s: Close of a written file reports a failed write-back", render(call), how)
		}
	}
	ast.Inspect(body, func(n ast.Node) bool {
		switch s := n.(type) {
		case *ast.FuncLit:
			checkBody(pass, s.Body, written)
			return false
		case *ast.ExprStmt:
			if call, ok := ast.Unparen(s.X).(*ast.CallExpr); ok {
				report(call, "dropped", false)
			}
		case *ast.DeferStmt:
			report(s.Call, "dropped by defer", false)
		case *ast.GoStmt:
			report(s.Call, "dropped by go", false)
		case *ast.AssignStmt:
			for i, rhs := range s.Rhs {
				call, ok := ast.Unparen(rhs).(*ast.CallExpr)
				if !ok || i >= len(s.Lhs) || len(s.Rhs) != len(s.Lhs) {
					continue
				}
				if id, ok := s.Lhs[i].(*ast.Ident); ok && id.Name == "_" && isSync(pass, call) {
					report(call, "assigned to _", true)
				}
			}
		}
		return true
	})
}

// callee is the function or method call calls, nil for a conversion, a
// builtin or a call of a function value.
func callee(pass *analysis.Pass, call *ast.CallExpr) *types.Func {
	var id *ast.Ident
	switch f := ast.Unparen(call.Fun).(type) {
	case *ast.Ident:
		id = f
	case *ast.SelectorExpr:
		id = f.Sel
	default:
		return nil
	}
	fn, _ := pass.TypesInfo.Uses[id].(*types.Func)
	return fn
}

// isSync reports whether call is one of the syncs whose error matters.
func isSync(pass *analysis.Pass, call *ast.CallExpr) bool {
	fn := callee(pass, call)
	if fn == nil || fn.Pkg() == nil {
		return false
	}
	pkg, name := fn.Pkg().Path(), fn.Name()
	switch {
	case pkg == "os" && name == "Sync" && isFileMethod(fn):
		return true
	case pkg == "golang.org/x/sys/unix" && (name == "Fsync" || name == "Fdatasync" || name == "Msync" || name == "SyncFileRange"):
		return true
	case strings.HasSuffix(pkg, "/internal/fsutil") && strings.HasPrefix(name, "Sync"):
		return true
	}
	return false
}

// isFileMethod reports whether fn is a method of *os.File.
func isFileMethod(fn *types.Func) bool {
	sig, ok := fn.Type().(*types.Signature)
	if !ok || sig.Recv() == nil {
		return false
	}
	ptr, ok := sig.Recv().Type().(*types.Pointer)
	if !ok {
		return false
	}
	named, ok := ptr.Elem().(*types.Named)
	return ok && named.Obj().Pkg() != nil && named.Obj().Pkg().Path() == "os" && named.Obj().Name() == "File"
}

// opensForWrite reports whether call opens a file for writing.
func opensForWrite(pass *analysis.Pass, call *ast.CallExpr) bool {
	fn := callee(pass, call)
	if fn == nil || fn.Pkg() == nil || fn.Pkg().Path() != "os" {
		return false
	}
	switch fn.Name() {
	case "Create", "CreateTemp":
		return true
	case "OpenFile":
		if len(call.Args) < 2 {
			return false
		}
		tv, ok := pass.TypesInfo.Types[call.Args[1]]
		if !ok || tv.Value == nil {
			return true // not a constant: it may write
		}
		v, ok := constant.Int64Val(tv.Value)
		return !ok || v&int64(writeFlags) != 0
	}
	return false
}

// closesWritten reports whether call is Close on a variable in written.
func closesWritten(pass *analysis.Pass, call *ast.CallExpr, written map[types.Object]bool) bool {
	sel, ok := ast.Unparen(call.Fun).(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "Close" {
		return false
	}
	fn := callee(pass, call)
	if fn == nil || !isFileMethod(fn) {
		return false
	}
	id, ok := ast.Unparen(sel.X).(*ast.Ident)
	if !ok {
		return false
	}
	obj := pass.TypesInfo.ObjectOf(id)
	return obj != nil && written[obj]
}

// render is the called expression as written, for messages.
func render(call *ast.CallExpr) string {
	switch f := ast.Unparen(call.Fun).(type) {
	case *ast.SelectorExpr:
		if x, ok := f.X.(*ast.Ident); ok {
			return x.Name + "." + f.Sel.Name
		}
		return f.Sel.Name
	case *ast.Ident:
		return f.Name
	}
	return "the call"
}
