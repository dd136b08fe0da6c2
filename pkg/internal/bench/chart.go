package bench

import (
	"fmt"
	"io"
	"strings"
)

// Chart writes an SVG of the end-to-end run: claims per second and p99
// latency per one-second window, and the stream backlog.
func (r *Report) Chart(w io.Writer) error {
	win := r.E2E.Windows
	if len(win) == 0 {
		return fmt.Errorf("no windows to chart")
	}
	const W, H, left, right, top, bottom = 900, 420, 70, 70, 40, 50
	pw, ph := float64(W-left-right), float64(H-top-bottom)
	var maxRPS, maxP99 float64
	for _, x := range win {
		maxRPS = max(maxRPS, float64(x.Requests))
		maxP99 = max(maxP99, float64(x.P99us)/1000)
	}
	var maxBacklog float64
	for _, b := range r.E2E.Backlog {
		maxBacklog = max(maxBacklog, float64(b))
	}
	maxRPS, maxP99 = niceCeil(maxRPS), niceCeil(maxP99)
	n := float64(len(win))
	xAt := func(i int) float64 { return left + pw*(float64(i)+0.5)/n }
	line := func(vals []float64, top float64) string {
		var pts []string
		for i, v := range vals {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", xAt(i), float64(H-bottom)-ph*v/top))
		}
		return strings.Join(pts, " ")
	}
	rps, p99 := make([]float64, len(win)), make([]float64, len(win))
	for i, x := range win {
		rps[i], p99[i] = float64(x.Requests), float64(x.P99us)/1000
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", W, H)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", W, H)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15">End to end: %d claims, %d users, %d units (claims/s and p99 per second)</text>`+"\n", left, r.E2E.Claims, r.E2E.Users, r.E2E.Stock)
	for i := 0; i <= 4; i++ {
		y := float64(H-bottom) - ph*float64(i)/4
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, W-right, y, y)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" fill="#1f77b4">%.0f</text>`+"\n", left-6, y+4, maxRPS*float64(i)/4)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" fill="#d62728">%.1f ms</text>`+"\n", W-right+6, y+4, maxP99*float64(i)/4)
	}
	for i := range win {
		if i%5 == 0 {
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%ds</text>`+"\n", xAt(i), H-bottom+16, i+1)
		}
	}
	fmt.Fprintf(&b, `<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="%s"/>`+"\n", line(rps, maxRPS))
	fmt.Fprintf(&b, `<polyline fill="none" stroke="#d62728" stroke-width="2" points="%s"/>`+"\n", line(p99, maxP99))
	if maxBacklog > 0 && len(r.E2E.Backlog) > 0 {
		bl := make([]float64, len(r.E2E.Backlog))
		for i, v := range r.E2E.Backlog {
			bl[i] = float64(v) / maxBacklog * maxRPS
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="#2ca02c" stroke-width="1.5" stroke-dasharray="4 3" points="%s"/>`+"\n", line(bl, maxRPS))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#1f77b4">— claims/s</text>`, left, H-12)
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#d62728">— p99 latency</text>`, left+110, H-12)
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#2ca02c">- - stream backlog (peak %d entries)</text>`, left+230, H-12, int64(maxBacklog))
	fmt.Fprintln(&b, "\n</svg>")
	_, err := io.WriteString(w, b.String())
	return err
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := 1.0
	for p*10 <= v {
		p *= 10
	}
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}
