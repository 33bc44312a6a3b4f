// Package flame turns pprof profiles into flame graphs (SVG or PNG, drawn
// with gonum/plot's vector graphics) and lists their top functions by flat
// and cumulative share. It is what 'ringlog-perf flamegraph' and 'make
// flamegraph' render the broker's profiles with.
package flame

import (
	"errors"
	"fmt"
	"hash/fnv"
	"image/color"
	"io"
	"sort"
	"strings"
	"sync"

	"github.com/google/pprof/profile"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/font/liberation"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Node is one frame of a flame graph: a function reached through the
// path of its ancestors.
type Node struct {
	// Name is the function's full name ("all" for the root).
	Name string
	// Value is the node's total: its own samples and its callees'.
	Value int64
	// Self is the value of samples whose leaf is this node.
	Self int64
	// Children are the callees, sorted by name.
	Children []*Node

	index map[string]*Node
}

func (n *Node) child(name string) *Node {
	if c, ok := n.index[name]; ok {
		return c
	}
	c := &Node{Name: name}
	if n.index == nil {
		n.index = map[string]*Node{}
	}
	n.index[name] = c
	n.Children = append(n.Children, c)
	return c
}

// Depth is the number of frame rows under and including n.
func (n *Node) Depth() int {
	d := 0
	for _, c := range n.Children {
		d = max(d, c.Depth())
	}
	return d + 1
}

// sampleIndex finds the sample type named typ ("" means the profile's
// default, or its last sample type).
func sampleIndex(p *profile.Profile, typ string) (int, error) {
	if len(p.SampleType) == 0 {
		return 0, fmt.Errorf("profile has no sample types")
	}
	if typ == "" {
		typ = p.DefaultSampleType
	}
	if typ == "" {
		return len(p.SampleType) - 1, nil
	}
	var names []string
	for i, st := range p.SampleType {
		if st.Type == typ {
			return i, nil
		}
		names = append(names, st.Type)
	}
	return 0, fmt.Errorf("profile has no sample type %q (it has %s)", typ, strings.Join(names, ", "))
}

// stackNames returns the function names of a sample from the root (the
// outermost caller) to the leaf, inlined frames included.
func stackNames(s *profile.Sample) []string {
	var out []string
	// Sample.Location[0] is the leaf; a location's Line[0] is its
	// innermost inlined function.
	for i := len(s.Location) - 1; i >= 0; i-- {
		loc := s.Location[i]
		if len(loc.Line) == 0 {
			out = append(out, fmt.Sprintf("0x%x", loc.Address))
			continue
		}
		for j := len(loc.Line) - 1; j >= 0; j-- {
			name := "?"
			if f := loc.Line[j].Function; f != nil && f.Name != "" {
				name = f.Name
			}
			out = append(out, name)
		}
	}
	return out
}

// BuildTree aggregates the samples of sample type typ ("" for the
// default) into a tree under a root named "all". Children are sorted by
// name, as in a classic flame graph (the x order means nothing else).
func BuildTree(p *profile.Profile, typ string) (*Node, error) {
	idx, err := sampleIndex(p, typ)
	if err != nil {
		return nil, err
	}
	root := &Node{Name: "all"}
	for _, s := range p.Sample {
		if idx >= len(s.Value) {
			continue
		}
		v := s.Value[idx]
		if v == 0 {
			continue
		}
		root.Value += v
		n := root
		for _, name := range stackNames(s) {
			n = n.child(name)
			n.Value += v
		}
		n.Self += v
	}
	var sortTree func(*Node)
	sortTree = func(n *Node) {
		sort.Slice(n.Children, func(i, j int) bool { return n.Children[i].Name < n.Children[j].Name })
		for _, c := range n.Children {
			sortTree(c)
		}
	}
	sortTree(root)
	return root, nil
}

// FuncStat is one function's share of a profile.
type FuncStat struct {
	// Name is the function's full name.
	Name string `json:"name"`
	// Flat: samples with the function as leaf; Cum: samples with the
	// function anywhere on the stack (counted once per sample).
	Flat int64 `json:"flat"`
	Cum  int64 `json:"cum"`
	// FlatPct and CumPct are shares of the profile's total.
	FlatPct float64 `json:"flat_pct"`
	CumPct  float64 `json:"cum_pct"`
}

// TopFunctions returns the profile's total for sample type typ and its n
// heaviest functions by flat and by cumulative value.
func TopFunctions(p *profile.Profile, typ string, n int) (total int64, flat, cum []FuncStat, err error) {
	idx, err := sampleIndex(p, typ)
	if err != nil {
		return 0, nil, nil, err
	}
	stats := map[string]*FuncStat{}
	get := func(name string) *FuncStat {
		s, ok := stats[name]
		if !ok {
			s = &FuncStat{Name: name}
			stats[name] = s
		}
		return s
	}
	for _, s := range p.Sample {
		if idx >= len(s.Value) || s.Value[idx] == 0 {
			continue
		}
		v := s.Value[idx]
		total += v
		names := stackNames(s)
		if len(names) == 0 {
			continue
		}
		get(names[len(names)-1]).Flat += v
		seen := map[string]bool{}
		for _, name := range names {
			if !seen[name] {
				seen[name] = true
				get(name).Cum += v
			}
		}
	}
	all := make([]FuncStat, 0, len(stats))
	for _, s := range stats {
		if total > 0 {
			s.FlatPct = 100 * float64(s.Flat) / float64(total)
			s.CumPct = 100 * float64(s.Cum) / float64(total)
		}
		all = append(all, *s)
	}
	flat = append([]FuncStat(nil), all...)
	sort.Slice(flat, func(i, j int) bool {
		if flat[i].Flat != flat[j].Flat {
			return flat[i].Flat > flat[j].Flat
		}
		return flat[i].Name < flat[j].Name
	})
	cum = all
	sort.Slice(cum, func(i, j int) bool {
		if cum[i].Cum != cum[j].Cum {
			return cum[i].Cum > cum[j].Cum
		}
		return cum[i].Name < cum[j].Name
	})
	return total, flat[:min(n, len(flat))], cum[:min(n, len(cum))], nil
}

// Options shape a flame graph.
type Options struct {
	// Title is drawn at the top (with the total).
	Title string
	// SampleType selects the profile's value ("" for its default), e.g.
	// "cpu", "alloc_space", "alloc_objects".
	SampleType string
	// Width of the drawing (default 1400 pt); RowHeight of a frame
	// (default 15 pt).
	Width, RowHeight vg.Length
	// MinWidth: frames narrower than this are not drawn, nor their
	// callees (default 0.4 pt).
	MinWidth vg.Length
	// Format is "svg" (default) or "png".
	Format string
}

var (
	flameFontsOnce sync.Once
	flameFace      font.Face
	flameTitleFace font.Face
)

func flameFonts() (font.Face, font.Face) {
	flameFontsOnce.Do(func() {
		cache := font.NewCache(liberation.Collection())
		fnt := font.Font{Typeface: "Liberation", Variant: "Mono"}
		flameFace = cache.Lookup(fnt, 9)
		flameTitleFace = cache.Lookup(font.Font{Typeface: "Liberation", Variant: "Sans"}, 14)
	})
	return flameFace, flameTitleFace
}

// frameColor is a warm colour chosen by the function's name, so a function
// has the same colour everywhere.
func frameColor(name string) color.Color {
	h := fnv.New32a()
	h.Write([]byte(name))
	v := h.Sum32()
	return color.RGBA{R: uint8(205 + v%50), G: uint8((v >> 8) % 200), B: uint8((v >> 16) % 55), A: 255}
}

// shortName drops the package path: "github.com/a/b/pkg.F" → "pkg.F".
func shortName(name string) string {
	if i := strings.LastIndex(name, "/"); i >= 0 && i < len(name)-1 {
		return name[i+1:]
	}
	return name
}

// fit returns the longest prefix of s (with ".." when cut) whose width
// with face is at most w, or "" when not even two letters fit.
func fit(face font.Face, s string, w vg.Length) string {
	if face.Width(s) <= w {
		return s
	}
	r := []rune(s)
	lo, hi := 0, len(r)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if face.Width(string(r[:mid])+"..") <= w {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	if lo < 2 {
		return ""
	}
	return string(r[:lo]) + ".."
}

// ErrNoSamples is Write's error for a profile without a sample of the
// type to draw: a CPU profile of an idle process. A flame graph of it
// would be an empty picture.
var ErrNoSamples = errors.New("the profile holds no samples")

// Write draws the profile's samples as a flame graph (root at the
// bottom, callees above their callers, widths proportional to the value)
// with the vg drawing API onto an SVG (or PNG) canvas and writes it to w.
func Write(w io.Writer, p *profile.Profile, o Options) error {
	root, err := BuildTree(p, o.SampleType)
	if err != nil {
		return err
	}
	idx, _ := sampleIndex(p, o.SampleType)
	st := p.SampleType[idx]
	if root.Value == 0 {
		return fmt.Errorf("%w of type %s", ErrNoSamples, st.Type)
	}
	if o.Width <= 0 {
		o.Width = 1400
	}
	if o.RowHeight <= 0 {
		o.RowHeight = 15
	}
	if o.MinWidth <= 0 {
		o.MinWidth = 0.4
	}
	face, titleFace := flameFonts()
	const margin = vg.Length(10)
	header := vg.Length(40)
	depth := root.Depth()
	height := margin*2 + header + vg.Length(depth)*o.RowHeight
	var c interface {
		vg.Canvas
		io.WriterTo
	}
	switch o.Format {
	case "", "svg":
		c = vgsvg.New(o.Width, height)
	case "png":
		c = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(o.Width, height), vgimg.UseDPI(96))}
	default:
		return fmt.Errorf("flame graph format %q: use svg or png", o.Format)
	}

	// Background.
	c.SetColor(color.RGBA{R: 250, G: 250, B: 245, A: 255})
	c.Fill(rect(0, 0, o.Width, height))

	title := o.Title
	if title == "" {
		title = "flame graph"
	}
	c.SetColor(color.Black)
	c.FillString(titleFace, vg.Point{X: margin, Y: height - margin - 14}, fit(titleFace, title, o.Width-2*margin))
	c.FillString(face, vg.Point{X: margin, Y: height - margin - 30},
		fmt.Sprintf("total %s %s; width = share of the total; frames under %.1f pt omitted", formatValue(root.Value, st.Unit), st.Type, float64(o.MinWidth)))

	if root.Value == 0 {
		_, err := c.WriteTo(w)
		return err
	}
	scale := float64(o.Width-2*margin) / float64(root.Value)
	var draw func(n *Node, x vg.Length, level int)
	draw = func(n *Node, x vg.Length, level int) {
		wd := vg.Length(float64(n.Value) * scale)
		if wd < o.MinWidth {
			return
		}
		y := margin + vg.Length(level)*o.RowHeight
		c.SetColor(frameColor(n.Name))
		c.Fill(rect(x, y, wd-0.3, o.RowHeight-1))
		pct := 100 * float64(n.Value) / float64(root.Value)
		label := fmt.Sprintf("%s %.1f%%", shortName(n.Name), pct)
		if t := fit(face, label, wd-4); t != "" {
			c.SetColor(color.Black)
			c.FillString(face, vg.Point{X: x + 2, Y: y + 4}, t)
		}
		cx := x
		for _, ch := range n.Children {
			draw(ch, cx, level+1)
			cx += vg.Length(float64(ch.Value) * scale)
		}
	}
	draw(root, margin, 0)
	_, err = c.WriteTo(w)
	return err
}

func rect(x, y, w, h vg.Length) vg.Path {
	var p vg.Path
	p.Move(vg.Point{X: x, Y: y})
	p.Line(vg.Point{X: x + w, Y: y})
	p.Line(vg.Point{X: x + w, Y: y + h})
	p.Line(vg.Point{X: x, Y: y + h})
	p.Close()
	return p
}

// formatValue prints a profile value in its unit.
func formatValue(v int64, unit string) string {
	switch unit {
	case "nanoseconds":
		return fmt.Sprintf("%.2fs of", float64(v)/1e9)
	case "bytes":
		switch {
		case v >= 1<<30:
			return fmt.Sprintf("%.2f GiB", float64(v)/(1<<30))
		case v >= 1<<20:
			return fmt.Sprintf("%.1f MiB", float64(v)/(1<<20))
		}
		return fmt.Sprintf("%d B", v)
	}
	return fmt.Sprintf("%d %s", v, unit)
}
