// Command durcheck runs durcheck.Analyzer (dropped errors of fsyncs,
// directory syncs and closes of written files) over packages, as
// `make vet` does: go run ./internal/durcheck/cmd/durcheck ./...
package main

import (
	"golang.org/x/tools/go/analysis/singlechecker"

	"github.com/ringlog/ringlog/internal/durcheck"
)

func main() { singlechecker.Main(durcheck.Analyzer) }
