package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"explorer-edge/internal/testkit"
)

// eventsPage opens an EventSource on the edge (another origin) and, on
// each head, fetches the newest block page and reports what it found to
// the page's own server. After three heads it cuts the stream (close),
// tells its server (/cut), and opens it again with the last id it saw
// (lastEventId: an EventSource made anew sends no Last-Event-ID header of
// its own); after six it reports /done.
const eventsPage = `<!doctype html><html><head><title>events</title></head><body><script>
const edge = %q;
const heads = [];
let cut = false;
const post = (path, body) => fetch(path, {method: 'POST', body: JSON.stringify(body)});
function open(lastId) {
  const es = new EventSource(edge + '/edge/v1/events?chains=CHAINX' + (lastId ? '&lastEventId=' + encodeURIComponent(lastId) : ''));
  let chain = Promise.resolve();
  es.addEventListener('head', ev => {
    const d = JSON.parse(ev.data), id = ev.lastEventId;
    chain = chain.then(async () => {
      if (heads.length >= 6) return;
      // no-cache: the browser's own copy (max-age=1) is asked again, not
      // taken as it is: the edge's copy is the new one.
      const r = await fetch(edge + '/api/v5/chainx/block/block-list?chainShortName=CHAINX', {cache: 'no-cache'});
      const b = await r.json();
      const top = Math.max(...b.data[0].blockList.map(x => Number(x.height)));
      heads.push({height: d.height, id, cacheStatus: r.headers.get('Cache-Status'), top});
      if (heads.length === 3 && !cut) {
        cut = true;
        es.close();
        await post('/cut', heads);
        open(id);
        return;
      }
      await post(heads.length >= 6 ? '/done' : '/progress', heads);
      if (heads.length >= 6) es.close();
    });
  });
  es.onerror = () => post('/error', {state: es.readyState});
}
open('');
</script></body></html>`

type pageHead struct {
	Height      int64  `json:"height"`
	ID          string `json:"id"`
	CacheStatus string `json:"cacheStatus"`
	Top         int64  `json:"top"`
}

// TestBrowserEventsCachedAndResumed: headless Chromium loads a page from
// another origin that follows the stream with an EventSource while
// explorer-sim's chain moves. On each head the block list it fetches is a
// hit holding the height announced (or, for a head replayed after the
// cut, a newer one); the stream, cut and opened again with the last id,
// resumes with the heads made meanwhile: six heads, one block apart, none
// missed.
func TestBrowserEventsCachedAndResumed(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("REQUIRE_CHROMIUM") != "" {
			t.Fatal("REQUIRE_CHROMIUM is set and chromium is not installed")
		}
		t.Skip("chromium is not installed (apt-get install chromium; .ci/run installs it): the browser check is skipped")
	}
	var html atomic.Pointer[string]
	progress := make(chan []pageHead, 16)
	done := make(chan []pageHead, 1)
	var h *harness
	announced := func(n float64) {
		testkit.WaitFor(t, fmt.Sprintf("head %v announced", n), func() bool { return polls(t, h, "CHAINX", "new") >= n })
	}
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var heads []pageHead
		json.Unmarshal(body, &heads)
		switch r.URL.Path {
		case "/":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprint(w, *html.Load())
		case "/progress":
			progress <- heads
		case "/cut":
			// Two blocks while the page is away; another subscriber keeps
			// the poll going.
			n := polls(t, h, "CHAINX", "new")
			for i := range 2 {
				h.clock.Advance(time.Second)
				announced(n + float64(i) + 1)
			}
		case "/done":
			done <- heads
		case "/error":
			t.Logf("EventSource error: %s", body)
		}
	}))
	defer page.Close()
	h = newHarness(t, withStream, withCORS(page.URL))
	openStream(t, h.addr, "/edge/v1/events?chains=CHAINX") // another subscriber, while the page is cut
	p := fmt.Sprintf(eventsPage, "http://"+h.addr)
	html.Store(&p)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := append(append([]string{}, chromiumFlags...), "--user-data-dir="+t.TempDir(), page.URL+"/")
	cmd := exec.CommandContext(ctx, chromium, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		cmd.Wait()
	}()
	var heads []pageHead
wait:
	for {
		select {
		case got := <-progress:
			// The page is at the newest head: the chain moves one block.
			if got[len(got)-1].Height != h.sim.Head("CHAINX") {
				continue // replayed heads still to come
			}
			before := polls(t, h, "CHAINX", "new")
			h.clock.Advance(time.Second)
			announced(before + 1)
		case heads = <-done:
			break wait
		case <-ctx.Done():
			t.Fatalf("the page did not finish; chromium:\n%s", stderr.String())
		}
	}
	t.Logf("heads: %+v", heads)
	for i, hd := range heads {
		if !strings.HasPrefix(hd.CacheStatus, "explorer-edge; hit") || hd.Top < hd.Height {
			t.Errorf("head %d (%d): the block list was %q holding %d", i, hd.Height, hd.CacheStatus, hd.Top)
		}
		if i > 0 && hd.Height != heads[i-1].Height+1 {
			t.Errorf("head %d is %d after %d: one missed or repeated", i, hd.Height, heads[i-1].Height)
		}
	}
	if heads[3].Top == heads[3].Height {
		t.Errorf("the first head after the cut (%d) was not a replay: the page found %d", heads[3].Height, heads[3].Top)
	}
}
