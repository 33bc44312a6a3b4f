package durcheck

import (
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"
)

// TestAnalyzer runs the check over testdata/src/github.com/ringlog/ringlog/a, whose `// want`
// comments name every report it must make; a report without one, or one
// missing, fails the test.
func TestAnalyzer(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), Analyzer, "github.com/ringlog/ringlog/a")
}
