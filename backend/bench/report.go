package bench

import (
	"encoding/csv"
	"fmt"
	"image/color"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// WriteCSV writes memcpy results with a header line.
func WriteCSV(w io.Writer, machine string, rs []Result) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"machine", "path", "dir", "bytes", "iters", "gbps", "backend_gbps"})
	for _, r := range rs {
		_ = cw.Write([]string{machine, r.Path, r.Dir, strconv.FormatUint(r.Size, 10), strconv.Itoa(r.Iters),
			strconv.FormatFloat(r.GBps, 'f', 3, 64), strconv.FormatFloat(r.BackendGBps, 'f', 3, 64)})
	}
	cw.Flush()
	return cw.Error()
}

// ReadCSV reads what WriteCSV wrote (to merge native and guest runs).
func ReadCSV(r io.Reader) ([]Result, error) {
	rows, err := csv.NewReader(r).ReadAll()
	if err != nil {
		return nil, err
	}
	var out []Result
	for i, row := range rows {
		if i == 0 || len(row) < 7 {
			continue
		}
		size, _ := strconv.ParseUint(row[3], 10, 64)
		iters, _ := strconv.Atoi(row[4])
		g, _ := strconv.ParseFloat(row[5], 64)
		b, _ := strconv.ParseFloat(row[6], 64)
		out = append(out, Result{Path: row[1], Dir: row[2], Size: size, Iters: iters, GBps: g, BackendGBps: b})
	}
	return out, nil
}

// WriteTable prints results as a table.
func WriteTable(w io.Writer, rs []Result) {
	fmt.Fprintf(w, "%-18s %-4s %12s %10s %12s\n", "path", "dir", "bytes", "GB/s", "backend GB/s")
	for _, r := range rs {
		be := "-"
		if r.BackendGBps > 0 {
			be = fmt.Sprintf("%.2f", r.BackendGBps)
		}
		fmt.Fprintf(w, "%-18s %-4s %12d %10.2f %12s\n", r.Path, r.Dir, r.Size, r.GBps, be)
	}
}

// Set is one labelled run of memcpy results (a CSV of vgpu bench memcpy:
// "native", "guest", "hostmode").
type Set struct {
	Label   string
	Results []Result
}

// MaxSeries is the most lines one panel of Plot draws.
const MaxSeries = 6

// series is one line of the plot: a path of a set, as the program or as
// the backend saw it.
type series struct {
	name    string
	set     int
	path    string
	backend bool
}

// plotSeries picks what Plot draws, in this order, at most MaxSeries: the
// native pinned and pageable paths, each vGPU set's pinned and pageable
// paths as the program saw them, then as the backend saw them. The other
// paths (segments-*, inline) stay in the table and the CSV.
func plotSeries(sets []Set) []series {
	has := func(i int, path string, backend bool) bool {
		for _, r := range sets[i].Results {
			if r.Path == path && (!backend || r.BackendGBps > 0) {
				return true
			}
		}
		return false
	}
	var out []series
	add := func(s series) {
		if len(out) < MaxSeries && has(s.set, s.path, s.backend) {
			out = append(out, s)
		}
	}
	for i, st := range sets {
		add(series{name: st.Label + " pinned", set: i, path: "native-pinned"})
		add(series{name: st.Label + " pageable", set: i, path: "native-pageable"})
	}
	for i, st := range sets {
		add(series{name: st.Label + " pinned", set: i, path: "pinned"})
		add(series{name: st.Label + " pageable", set: i, path: "pageable-auto"})
	}
	for i, st := range sets {
		add(series{name: st.Label + " pinned, backend side", set: i, path: "pinned", backend: true})
		add(series{name: st.Label + " pageable, backend side", set: i, path: "pageable-auto", backend: true})
	}
	return out
}

// Plot draws bandwidth against copy size to a PNG: two panels, host to
// device and device to host, the series plotSeries picks, and one legend
// below both panels, outside the data.
func Plot(path, title string, sets []Set) error {
	ss := plotSeries(sets)
	if len(ss) == 0 {
		return fmt.Errorf("bench: plot %s: no pinned or pageable results to draw", path)
	}
	dirs := []string{"H2D", "D2H"}
	names := map[string]string{"H2D": "host to device", "D2H": "device to host"}
	panels := make([]*plot.Plot, len(dirs))
	legend := plot.NewLegend()
	legend.TextStyle.Color = color.Black
	for d, dir := range dirs {
		p := plot.New()
		p.Title.Text = names[dir]
		p.X.Label.Text = "copy size (bytes)"
		p.Y.Label.Text = "GB/s"
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Y.Min = 0
		p.Add(plotter.NewGrid())
		for i, s := range ss {
			var pts plotter.XYs
			for _, r := range sets[s.set].Results {
				if r.Path != s.path || r.Dir != dir || r.Size == 0 {
					continue
				}
				y := r.GBps
				if s.backend {
					y = r.BackendGBps
				}
				pts = append(pts, plotter.XY{X: float64(r.Size), Y: y})
			}
			sort.Slice(pts, func(a, b int) bool { return pts[a].X < pts[b].X })
			l, sc, err := plotter.NewLinePoints(pts)
			if err != nil {
				return fmt.Errorf("bench: plot %s: %s %s: %w", path, s.name, dir, err)
			}
			c := plotutil.Color(i)
			l.Color, sc.Color = c, c
			sc.Shape = plotutil.Shape(i)
			switch {
			case s.backend:
				l.Dashes = []vg.Length{vg.Points(1), vg.Points(2)}
			case s.set > 0 || !strings.HasPrefix(s.path, "native-"):
				l.Dashes = []vg.Length{vg.Points(5), vg.Points(2)}
			}
			p.Add(l, sc)
			if d == 0 {
				legend.Add(s.name, l, sc)
			}
		}
		panels[d] = p
	}
	const w, h, legendH = 11 * vg.Inch, 6 * vg.Inch, 1.3 * vg.Inch
	img := vgimg.New(w, h)
	dc := draw.New(img)
	top := draw.Crop(dc, 0, 0, legendH, 0)
	titleH := vg.Length(0)
	if title != "" {
		ts := legend.TextStyle
		ts.Font.Size = vg.Points(14)
		ts.XAlign, ts.YAlign = draw.XCenter, draw.YTop
		dc.FillText(ts, vg.Point{X: w / 2, Y: h - vg.Points(4)}, title)
		titleH = ts.Height(title) + vg.Points(8)
	}
	top = draw.Crop(top, 0, 0, 0, -titleH)
	tiles := draw.Tiles{Rows: 1, Cols: len(dirs), PadX: vg.Inch / 4, PadLeft: vg.Inch / 8, PadRight: vg.Inch / 8}
	for d, c := range plot.Align([][]*plot.Plot{panels}, tiles, top)[0] {
		panels[d].Draw(c)
	}
	legend.Top, legend.Left = true, true
	legend.XOffs = vg.Inch / 2
	legend.Draw(draw.Crop(dc, 0, 0, 0, legendH-h))
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench: plot: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("bench: plot %s: %w", path, err)
	}
	return f.Close()
}

// Create opens a results file for writing.
func Create(path string) (*os.File, error) { return os.Create(path) }
