package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestRateLimit(t *testing.T) {
	srv, err := New(Config{Manager: env.mgr, Store: env.st, Auth: env.auth, Audit: env.audit,
		PresignKey: []byte("k"), RateLimit: 1, RateBurst: 3})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	get := func(key string) *http.Response {
		req, _ := http.NewRequest("GET", hs.URL+"/v1/sandboxes", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for i := 0; i < 3; i++ {
		if resp := get(env.aKey); resp.StatusCode != 200 {
			t.Fatalf("request %d within the burst: %d", i, resp.StatusCode)
		}
	}
	resp := get(env.aKey)
	defer resp.Body.Close()
	var body struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	json.NewDecoder(resp.Body).Decode(&body)
	if resp.StatusCode != 429 || body.Error.Code != "rate_limited" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("over the limit: %d %+v Retry-After=%q", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	// Another principal has its own bucket.
	if resp := get(env.bKey); resp.StatusCode != 200 {
		t.Fatalf("other principal: %d", resp.StatusCode)
	}
	// Unauthenticated health checks are never limited.
	for i := 0; i < 10; i++ {
		r, err := http.Get(hs.URL + "/healthz")
		if err != nil || r.StatusCode != 200 {
			t.Fatalf("healthz: %v %v", r, err)
		}
		r.Body.Close()
	}
}
