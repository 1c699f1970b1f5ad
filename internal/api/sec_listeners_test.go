package api

// Issue 15, items 10, 12 and 13: the preview proxy strips every credential
// the daemon consumes; /metrics needs metrics:read and sums sandbox ids
// away; upgraded preview connections are capped.

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

const testKey = "wdn_abcdefghijkl_0123456789abcdefghijklmnopqrstuv"

func TestStripCredentials(t *testing.T) {
	h := http.Header{
		"Authorization":       {"Basic dTpw", "Bearer " + testKey, "bearer   " + testKey, testKey, "Token " + testKey},
		"Proxy-Authorization": {"Basic dTpw"},
		"X-Api-Key":           {testKey, "their-own-key"},
		"X_api_key":           {testKey},
		"X-Access-Token":      {"0123abcd"},
		"X_access_token":      {"0123abcd"},
		"Authorization_":      {"kept: not a spelling of a header the daemon reads"},
		"Cookie":              {"a=1; warden_preview=tok; b=2", " Warden_Preview =tok2", "warden_preview=tok3"},
		"X-Other":             {"kept"},
	}
	stripCredentials(h)
	want := http.Header{
		"Authorization":  {"Basic dTpw"},
		"X-Api-Key":      {"their-own-key"},
		"Authorization_": {"kept: not a spelling of a header the daemon reads"},
		"Cookie":         {"a=1; b=2"},
		"X-Other":        {"kept"},
	}
	got, _ := json.Marshal(h)
	exp, _ := json.Marshal(want)
	if string(got) != string(exp) {
		t.Fatalf("stripCredentials:\n got %s\nwant %s", got, exp)
	}
	for _, tc := range []struct{ in, want string }{
		{"WARDEN_TOKEN=x&a=1", "a=1"},
		{"Warden%5FToken=x&warden_token=y&a=1", "a=1"},
	} {
		if got := dropQueryParam(tc.in, PreviewTokenParam); got != tc.want {
			t.Errorf("dropQueryParam(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// FuzzStripCredentials: whatever the header lines, nothing the daemon
// reads as a credential survives: no credential header carries a Warden
// key, no X-Access-Token or Proxy-Authorization is left, and Go's own
// cookie parser (which the daemon uses) finds no preview cookie.
func FuzzStripCredentials(f *testing.F) {
	for _, s := range [][3]string{
		{"Authorization", "Bearer " + testKey, "warden_preview=x"},
		{"authorization", "Basic dTpw", "a=1; warden_preview=x"},
		{"X_API_KEY", testKey, " warden_preview =x; b"},
		{"x-access-token", "t", "WARDEN_PREVIEW=\"x\""},
		{"Proxy_Authorization", "Basic x", ";;warden_preview=;"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, name, value, cookie string) {
		h := http.Header{}
		h[name] = []string{value, "Bearer " + testKey}
		h[http.CanonicalHeaderKey(name)] = append(h[http.CanonicalHeaderKey(name)], value)
		h["Cookie"] = []string{cookie, cookie + "; warden_preview=x"}
		stripCredentials(h)
		for k, vs := range h {
			switch strings.ReplaceAll(strings.ToLower(k), "_", "-") {
			case "authorization", "x-api-key":
				for _, v := range vs {
					if strings.Contains(v, "wdn_") {
						t.Fatalf("%s: %q kept", k, v)
					}
				}
			case "proxy-authorization", "x-access-token":
				t.Fatalf("%s kept", k)
			}
		}
		r := &http.Request{Header: h}
		for _, c := range r.Cookies() {
			if strings.EqualFold(c.Name, PreviewCookie) {
				t.Fatalf("cookie %q kept in %q", c.Name, h["Cookie"])
			}
		}
	})
}

// FuzzDropQueryParam: the program's query has no preview token however the
// parameter is written, and the rest is kept.
func FuzzDropQueryParam(f *testing.F) {
	for _, s := range []string{"", "warden_token=x", "a=1&warden%5Ftoken=x", "WARDEN_TOKEN=1&&b", "warden_token", "a=%zz&warden_token=1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		out := dropQueryParam(raw, PreviewTokenParam)
		q, _ := url.ParseQuery(out)
		for k := range q {
			if strings.EqualFold(k, PreviewTokenParam) {
				t.Fatalf("dropQueryParam(%q) = %q keeps %q", raw, out, k)
			}
		}
		if len(out) > len(raw) {
			t.Fatalf("dropQueryParam(%q) = %q grew", raw, out)
		}
	})
}

func TestUpgradeSlots(t *testing.T) {
	u := &upgradeSlots{perPort: 3, perClient: 2}
	w := httptest.NewRecorder()
	r1, err := u.acquire(w, "sb:80", "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := u.acquire(w, "sb:80", "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := u.acquire(w, "sb:81", "a"); err == nil || !strings.Contains(err.Error(), "from your address") {
		t.Fatalf("third from a client capped at 2: %v", err)
	}
	if _, err := u.acquire(w, "sb:80", "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := u.acquire(w, "sb:80", "c"); err == nil || !strings.Contains(err.Error(), "to this port") {
		t.Fatalf("fourth to a port capped at 3: %v", err)
	}
	r1()
	r1() // releasing twice frees one slot
	if _, err := u.acquire(w, "sb:80", "c"); err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if _, err := u.acquire(w, "sb:80", "d"); err == nil {
		t.Fatal("a double release freed two slots")
	}
	if !isUpgrade(http.Header{"Connection": {"keep-alive, Upgrade"}, "Upgrade": {"websocket"}}) ||
		isUpgrade(http.Header{"Connection": {"upgrade"}}) || isUpgrade(http.Header{"Upgrade": {"websocket"}}) {
		t.Fatal("isUpgrade")
	}
}

func TestDropLabel(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_bytes_total", Help: "h"}, []string{"sandbox", "direction"})
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "x_active", Help: "h"}, []string{"sandbox"})
	hv := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "x_seconds", Help: "h", Buckets: []float64{1, 10}}, []string{"sandbox"})
	reg.MustRegister(c, g, hv)
	c.WithLabelValues("sb-one", "in").Add(3)
	c.WithLabelValues("sb-two", "in").Add(4)
	c.WithLabelValues("sb-two", "out").Add(5)
	g.WithLabelValues("sb-one").Set(1)
	g.WithLabelValues("sb-two").Set(2)
	hv.WithLabelValues("sb-one").Observe(0.5)
	hv.WithLabelValues("sb-two").Observe(5)
	fams, err := dropLabel{g: reg, label: "sandbox"}.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			key := f.GetName()
			for _, l := range m.GetLabel() {
				if l.GetName() == "sandbox" {
					t.Fatalf("%s keeps the sandbox label", f.GetName())
				}
				key += "," + l.GetValue()
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				got[key] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				got[key] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				got[key] = float64(m.GetHistogram().GetSampleCount())
				got[key+",le1"] = float64(m.GetHistogram().GetBucket()[0].GetCumulativeCount())
			}
		}
	}
	want := map[string]float64{"x_bytes_total,in": 7, "x_bytes_total,out": 5, "x_active": 3, "x_seconds": 2, "x_seconds,le1": 1}
	gj, _ := json.Marshal(got)
	wj, _ := json.Marshal(want)
	if string(gj) != string(wj) {
		t.Fatalf("summed: %s, want %s", gj, wj)
	}
}

// TestMetricsAuth: GET /metrics needs the metrics:read scope, and a
// collector's sandbox ids are summed away.
func TestMetricsAuth(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	get := func(key string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, env.hs.URL+"/metrics", nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, body := get(""); st != 401 || !strings.Contains(body, `"code":"unauthenticated"`) {
		t.Fatalf("no key: %d %s", st, body)
	}
	if st, body := get(env.aKey); st != 403 || !strings.Contains(body, `"code":"forbidden"`) || !strings.Contains(body, "metrics:read") {
		t.Fatalf("key without metrics:read: %d %s", st, body)
	}
	_, key, err := newAgent(ctx, "metrics-"+uniq(), []string{"metrics:read"})
	if err != nil {
		t.Fatal(err)
	}
	// A collector whose series are per sandbox, like the network's.
	cv := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "warden_test_per_sandbox_total", Help: "h"}, []string{"sandbox"})
	cv.WithLabelValues(env.sbA).Add(2)
	cv.WithLabelValues("sb-other").Add(3)
	if err := env.srv.RegisterCollector(cv); err != nil {
		t.Fatal(err)
	}
	defer env.srv.metrics.labelled.Unregister(cv)
	for _, k := range []string{key, env.adminKey} {
		st, body := get(k)
		if st != 200 || !strings.Contains(body, "warden_sandboxes{") || !strings.Contains(body, "warden_test_per_sandbox_total 5") {
			t.Fatalf("with metrics:read: %d %s", st, body)
		}
		if strings.Contains(body, env.sbA) || strings.Contains(body, "sb-other") {
			t.Fatalf("metrics name sandboxes: %s", body)
		}
	}
	// The separate listener's handler serves the same without a key.
	rec := httptest.NewRecorder()
	env.srv.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), "warden_test_per_sandbox_total 5") {
		t.Fatalf("MetricsHandler: %d %s", rec.Code, rec.Body)
	}
}
