package test

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/rangealloc/rangealloc/api/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chromium returns the path of a Chromium binary (Debian's package
// installs /usr/bin/chromium), or "" when there is none.
func chromium() string {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// TestUIScreenshot: a real browser draws the status page of the leader of
// a three-node cluster with values held in both bands of both pools, and
// the picture shows held cells in the static band's colour and in the
// dynamic band's. Skipped where Chromium is not installed. With
// RANGEALLOC_UI_SCREENSHOT=file.png the screenshot is kept there (this is
// how docs/img/status-page.png is made).
func TestUIScreenshot(t *testing.T) {
	// Not parallel (docs/TESTING.md): headless Chromium is heavy on the CPU.
	browser := chromium()
	if browser == "" {
		t.Skip("no chromium binary found: install Debian's chromium package to run this test")
	}
	ps := newProcs(t, 3)
	leader := byID(ps, waitLeader(t, ps[0]))
	ctx := ctxE(t)
	c := leader.client()
	// Requested values land in the static band, where Kubernetes puts
	// them (10.96.0.10 is a cluster's DNS Service); counted ones in the
	// dynamic band.
	for _, v := range []string{"10.96.0.1", "10.96.0.10", "10.96.0.11", "10.96.0.12", "10.96.0.100"} {
		_, _, err := c.Allocate(ctx, "clusterip-ipv4", v, "static/"+v, client.Options{})
		require.NoError(t, err)
	}
	for p := 30000; p < 30040; p++ {
		_, _, err := c.Allocate(ctx, "nodeport", fmt.Sprint(p), "static", client.Options{})
		require.NoError(t, err)
	}
	_, _, err := c.AllocateCount(ctx, "clusterip-ipv4", "dynamic", 3000, client.Options{})
	require.NoError(t, err)
	_, _, err = c.AllocateCount(ctx, "nodeport", "dynamic", 900, client.Options{})
	require.NoError(t, err)

	url := "http://" + leader.http + "/ui/"
	page := httpGet(t, url)
	assert.Contains(t, page, `data-first="10.96.0.10" data-last="10.96.0.10" data-values="1" data-held="1"`, "a requested value is drawn held where it is")
	assert.Contains(t, page, `data-first="30000" data-last="30000" data-values="1" data-held="1"`)

	shot := os.Getenv("RANGEALLOC_UI_SCREENSHOT")
	if shot == "" {
		shot = filepath.Join(t.TempDir(), "status-page.png")
	}
	bctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(bctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		"--user-data-dir="+t.TempDir(), "--screenshot="+shot, "--window-size=1280,1400", url)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "chromium: %s", out)
	data, err := os.ReadFile(shot)
	require.NoError(t, err, "chromium wrote no screenshot: %s", out)
	img, err := png.Decode(bytes.NewReader(data))
	require.NoError(t, err, "the screenshot is a PNG")
	assert.Equal(t, image.Rect(0, 0, 1280, 1400), img.Bounds())
	colours := countColours(img)
	// Cells whose every value is held, as the page's CSS fills them.
	assert.Positive(t, colours[color.RGBA{0xb4, 0x53, 0x09, 0xff}], "held cells of a static band are drawn")
	assert.Positive(t, colours[color.RGBA{0x1e, 0x40, 0xaf, 0xff}], "held cells of a dynamic band are drawn")
	assert.Greater(t, len(colours), 10, "the page is drawn, not blank")
	t.Logf("screenshot: %s (%d bytes)", shot, len(data))
}

// countColours counts the pixels of each colour of img.
func countColours(img image.Image) map[color.RGBA]int {
	out := map[color.RGBA]int{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			out[color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)]++
		}
	}
	return out
}

// httpGet returns the body of a GET that must answer 200.
func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "GET %s: %s", url, body)
	return string(body)
}
