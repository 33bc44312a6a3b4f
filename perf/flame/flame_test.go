package flame

import (
	"bytes"
	"encoding/xml"
	"io"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
)

// synthProfile builds a CPU-like profile:
//
//	main → serve → parse      (30)
//	main → serve → write      (50, write inlined into serve's location)
//	main → gc                 (20)
//	main                      (self 0)
func synthProfile(t *testing.T) *profile.Profile {
	t.Helper()
	fn := map[string]*profile.Function{}
	var funcs []*profile.Function
	for i, name := range []string{"main.main", "example.com/srv.serve", "example.com/srv.parse", "example.com/srv.write", "runtime.gcBgMarkWorker"} {
		f := &profile.Function{ID: uint64(i + 1), Name: name}
		fn[name] = f
		funcs = append(funcs, f)
	}
	loc := func(id uint64, names ...string) *profile.Location {
		l := &profile.Location{ID: id, Address: 0x1000 * id}
		for _, n := range names { // innermost first
			l.Line = append(l.Line, profile.Line{Function: fn[n]})
		}
		return l
	}
	lMain := loc(1, "main.main")
	lServe := loc(2, "example.com/srv.serve")
	lParse := loc(3, "example.com/srv.parse")
	lWrite := loc(4, "example.com/srv.write", "example.com/srv.serve") // write inlined in serve
	lGC := loc(5, "runtime.gcBgMarkWorker")
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		Sample: []*profile.Sample{
			{Location: []*profile.Location{lParse, lServe, lMain}, Value: []int64{3, 30}},
			{Location: []*profile.Location{lWrite, lMain}, Value: []int64{5, 50}},
			{Location: []*profile.Location{lGC, lMain}, Value: []int64{2, 20}},
		},
		Location:          []*profile.Location{lMain, lServe, lParse, lWrite, lGC},
		Function:          funcs,
		DefaultSampleType: "cpu",
	}
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	// Round-trip through the wire format, as a fetched profile would.
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	q, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func TestBuildFlameTree(t *testing.T) {
	p := synthProfile(t)
	root, err := BuildTree(p, "")
	if err != nil {
		t.Fatal(err)
	}
	if root.Value != 100 {
		t.Fatalf("root value %d, want 100", root.Value)
	}
	if len(root.Children) != 1 || root.Children[0].Name != "main.main" {
		t.Fatalf("root children %+v", root.Children)
	}
	m := root.Children[0]
	if m.Value != 100 || m.Self != 0 || len(m.Children) != 2 {
		t.Fatalf("main: value %d self %d children %d", m.Value, m.Self, len(m.Children))
	}
	// Sorted by name: example.com/srv.serve before runtime.gcBgMarkWorker.
	serve, gc := m.Children[0], m.Children[1]
	if serve.Name != "example.com/srv.serve" || serve.Value != 80 || gc.Value != 20 || gc.Self != 20 {
		t.Fatalf("serve %s=%d, gc %s=%d", serve.Name, serve.Value, gc.Name, gc.Value)
	}
	// The inlined write is serve's child, not a sibling.
	if len(serve.Children) != 2 || serve.Children[0].Name != "example.com/srv.parse" || serve.Children[0].Value != 30 ||
		serve.Children[1].Name != "example.com/srv.write" || serve.Children[1].Value != 50 {
		t.Fatalf("serve's children: %+v %+v", serve.Children[0], serve.Children[1])
	}
	if root.Depth() != 4 {
		t.Errorf("depth %d, want 4", root.Depth())
	}
	// Another sample type.
	root2, err := BuildTree(p, "samples")
	if err != nil || root2.Value != 10 {
		t.Fatalf("samples: %v %v", root2, err)
	}
	if _, err := BuildTree(p, "alloc_space"); err == nil || !strings.Contains(err.Error(), "cpu") {
		t.Errorf("unknown sample type: %v", err)
	}
}

func TestTopFunctions(t *testing.T) {
	total, flat, cum, err := TopFunctions(synthProfile(t), "cpu", 3)
	if err != nil {
		t.Fatal(err)
	}
	if total != 100 {
		t.Fatalf("total %d", total)
	}
	if flat[0].Name != "example.com/srv.write" || flat[0].FlatPct != 50 || flat[1].Name != "example.com/srv.parse" {
		t.Errorf("flat %+v", flat)
	}
	if cum[0].Name != "main.main" || cum[0].CumPct != 100 || cum[1].Name != "example.com/srv.serve" || cum[1].CumPct != 80 {
		t.Errorf("cum %+v", cum)
	}
}

func TestWriteFlameGraph(t *testing.T) {
	var buf bytes.Buffer
	if err := Write(&buf, synthProfile(t), Options{Title: "synthetic <cpu>"}); err != nil {
		t.Fatal(err)
	}
	svg := buf.String()
	// Well-formed XML.
	dec := xml.NewDecoder(strings.NewReader(svg))
	texts := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not XML: %v\n%s", err, svg[:min(len(svg), 2000)])
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "text" {
			texts++
		}
	}
	for _, want := range []string{"<svg", "synthetic &lt;cpu&gt;", "main.main 100.0%", "srv.serve 80.0%", "srv.write 50.0%", "srv.parse 30.0%", "runtime.gcBgMarkWorker 20.0%", "total 0.00s of cpu"} {
		if !strings.Contains(svg, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
	// Title, caption, and one label per frame (all, main, serve, parse,
	// write, gc).
	if texts != 8 {
		t.Errorf("%d text elements, want 8", texts)
	}
	// One filled rectangle per frame plus the background.
	if n := strings.Count(svg, "<path"); n != 7 {
		t.Errorf("%d paths, want 7", n)
	}
}
