package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

var (
	blue   = color.RGBA{R: 31, G: 119, B: 180, A: 255}
	orange = color.RGBA{R: 255, G: 127, B: 14, A: 255}
	red    = color.RGBA{R: 214, G: 39, B: 40, A: 255}
	grey   = color.RGBA{R: 120, G: 120, B: 120, A: 255}
)

// series is one line of a panel: its legend name, its colour, and the
// figure it plots for each point, against the point's offered rate.
type series struct {
	name   string
	c      color.Color
	y      func(point) float64
	dashed bool
}

// lagSeries are the push lag panel's lines.
var lagSeries = []series{
	{name: "p50", c: blue, y: func(p point) float64 { return p.LagP50 }},
	{name: "p99", c: orange, y: func(p point) float64 { return p.LagP99 }},
	{name: "max", c: red, y: func(p point) float64 { return p.LagMax }},
}

// labelled are the lag lines whose measured values are written next to
// their points, dy above: on a scale that must also show the targets,
// small lags are hard to read off the axis.
var labelled = []struct {
	series
	dy vg.Length
}{{lagSeries[1], -vg.Points(14)}, {lagSeries[2], vg.Points(4)}}

// targets are the lag panel's target lines, each at its ms across the
// offered rates; a target of 0 (or less) is none.
func targets(p99Target, maxTarget float64) []series {
	var ts []series
	for _, t := range []struct {
		name string
		ms   float64
		c    color.Color
	}{{"p99 target", p99Target, orange}, {"max target", maxTarget, red}} {
		if ms := t.ms; ms > 0 {
			ts = append(ts, series{name: fmt.Sprintf("%s %.0f ms", t.name, ms), c: t.c, y: func(point) float64 { return ms }})
		}
	}
	return ts
}

// throughputSeries are the lower panel's lines: achieved against the ideal
// of achieving what was offered.
func throughputSeries(pts []point) []series {
	return []series{
		{name: "achieved " + missingNote(pts), c: blue, y: func(p point) float64 { return p.Throughput }},
		{name: "offered (ideal)", c: grey, y: func(p point) float64 { return p.Offered }, dashed: true},
	}
}

// lagTop is the lag panel's y axis top: room above the highest target or
// sample for the legend, so neither the target lines nor the data run
// under it (or off the top).
func lagTop(pts []point, p99Target, maxTarget float64) float64 {
	return 1.4 * highest(pts, append(targets(p99Target, maxTarget), lagSeries...))
}

// throughputTop is the throughput panel's: above achieved and offered.
func throughputTop(pts []point) float64 {
	return 1.15 * highest(pts, throughputSeries(pts))
}

// highest is the highest figure any of lines draws, 0 if none is above.
func highest(pts []point, lines []series) float64 {
	var hi float64
	for _, s := range lines {
		for _, xy := range xys(pts, s.y) {
			hi = max(hi, xy.Y)
		}
	}
	return hi
}

// render writes a two-panel PNG: push lag against offered load on top,
// achieved against offered throughput below, sharing the x axis so a knee
// in one lines up with the other.
func render(path, title string, pts []point, p99Target, maxTarget float64) error {
	lag := plot.New()
	lag.Title.Text = title
	lag.Y.Label.Text = "push lag, ms (receive - (first report + W + grace))"
	lag.X.Label.Text = "offered new windows/s"
	lag.Legend.Top = true
	lag.Legend.Left = true
	lag.Add(plotter.NewGrid())
	for _, s := range lagSeries {
		if err := addSeries(lag, s, pts); err != nil {
			return err
		}
	}
	for _, s := range labelled {
		if err := addValueLabels(lag, s.c, pts, s.y, s.dy); err != nil {
			return err
		}
	}
	for _, t := range targets(p99Target, maxTarget) {
		if err := addTarget(lag, t, pts); err != nil {
			return err
		}
	}
	lag.Y.Min = 0
	lag.Y.Max = lagTop(pts, p99Target, maxTarget)
	lag.Y.Tick.Marker = stepTicks{step: niceStep(lag.Y.Max)}

	tp := plot.New()
	tp.Y.Label.Text = "windows/s"
	tp.X.Label.Text = "offered new windows/s (median of runs; missing windows in legend)"
	tp.Legend.Top = true
	tp.Legend.Left = true
	tp.Add(plotter.NewGrid())
	for _, s := range throughputSeries(pts) {
		if err := addSeries(tp, s, pts); err != nil {
			return err
		}
	}
	tp.Y.Min = 0
	tp.Y.Max = throughputTop(pts)
	tp.Y.Tick.Marker = stepTicks{step: niceStep(tp.Y.Max)}

	img := vgimg.New(vg.Points(720), vg.Points(760))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadX: vg.Millimeter, PadY: 6 * vg.Millimeter,
		PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(14)}
	plots := [][]*plot.Plot{{lag}, {tp}}
	canvases := plot.Align(plots, tiles, dc)
	lag.Draw(canvases[0][0])
	tp.Draw(canvases[1][0])

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// xys are y's figure of each point against its offered rate.
func xys(pts []point, y func(point) float64) plotter.XYs {
	xy := make(plotter.XYs, len(pts))
	for i, pt := range pts {
		xy[i] = plotter.XY{X: pt.Offered, Y: y(pt)}
	}
	return xy
}

func addSeries(p *plot.Plot, s series, pts []point) error {
	line, points, err := plotter.NewLinePoints(xys(pts, s.y))
	if err != nil {
		return err
	}
	line.Color, line.Width = s.c, vg.Points(2)
	points.Color, points.Shape = s.c, draw.CircleGlyph{}
	if s.dashed {
		line.Dashes = []vg.Length{vg.Points(6), vg.Points(4)}
		points.Radius = 0
	}
	p.Add(line, points)
	p.Legend.Add(s.name, line, points)
	return nil
}

func addTarget(p *plot.Plot, t series, pts []point) error {
	l, err := plotter.NewLine(xys(pts, t.y))
	if err != nil {
		return err
	}
	l.Color, l.Width = t.c, vg.Points(1)
	l.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
	p.Add(l)
	p.Legend.Add(t.name, l)
	return nil
}

func missingNote(pts []point) string {
	var miss int64
	for _, p := range pts {
		miss += p.Missing
	}
	return fmt.Sprintf("(windows missing: %d)", miss)
}

// valueLabels are y's figure of each point (rounded), at the point.
func valueLabels(pts []point, y func(point) float64) plotter.XYLabels {
	l := plotter.XYLabels{XYs: xys(pts, y), Labels: make([]string, len(pts))}
	for i, xy := range l.XYs {
		l.Labels[i] = fmt.Sprintf("%.0f", xy.Y)
		if xy.Y < 10 {
			l.Labels[i] = fmt.Sprintf("%.1f", xy.Y)
		}
	}
	return l
}

// addValueLabels writes each point's value (rounded) beside it, dy above.
func addValueLabels(p *plot.Plot, c color.Color, pts []point, y func(point) float64, dy vg.Length) error {
	labels, err := plotter.NewLabels(valueLabels(pts, y))
	if err != nil {
		return err
	}
	for i := range labels.TextStyle {
		labels.TextStyle[i].Color = c
	}
	labels.Offset = vg.Point{X: vg.Points(5), Y: dy}
	p.Add(labels)
	return nil
}

// stepTicks marks the axis every step (labelled) and every
// step/5 (unlabelled): gonum's default ticker labels too few values here.
type stepTicks struct{ step float64 }

func (t stepTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	minor := t.step / 5
	for i := math.Ceil(lo / minor); i*minor <= hi; i++ {
		v := i * minor
		label := ""
		if math.Mod(i, 5) == 0 {
			// The shortest decimal at float32's precision: a multiple of
			// a step under 1 is not exact in float64 (7 × 0.1 reads
			// 0.7000000000000001), and every figure plotted is far
			// within float32's exact integers.
			label = strconv.FormatFloat(v, 'f', -1, 32)
		}
		ticks = append(ticks, plot.Tick{Value: v, Label: label})
	}
	return ticks
}

// niceStep is a 1, 2 or 5 times a power of ten giving 4 to 10 labelled
// ticks up to hi.
func niceStep(hi float64) float64 {
	if hi <= 0 {
		return 1
	}
	mag := math.Pow(10, math.Floor(math.Log10(hi)))
	for _, m := range []float64{0.1, 0.2, 0.5, 1, 2, 5} {
		if hi/(m*mag) <= 10 {
			return m * mag
		}
	}
	return 10 * mag
}
