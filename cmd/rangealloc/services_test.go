package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rangealloc/rangealloc/api/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeAPI answers the Service endpoints from a map, the way the server
// does in outline (201 on create, 200 on update, the same revision for a
// PUT that changes nothing, dryRun stores nothing), and records every
// request.
type fakeAPI struct {
	t *testing.T
	// mu guards the following
	mu       sync.Mutex
	svcs     map[string]types.Service
	rev      uint64
	network  types.ServiceNetwork
	findings []types.Finding              // what a reconcile reports
	fail     map[string]types.ErrorDetail // "PUT ns/name" → a 422 answer
	reqs     []string                     // "METHOD path?query"
	bodies   map[string][]json.RawMessage // "METHOD path" → bodies in order
	imported *types.ImportRequest
}

func newFakeAPI(t *testing.T) (*fakeAPI, string) {
	f := &fakeAPI{t: t, svcs: map[string]types.Service{}, rev: 10, fail: map[string]types.ErrorDetail{},
		bodies: map[string][]json.RawMessage{},
		network: types.ServiceNetwork{IPFamilies: []string{"IPv4", "IPv6"},
			Pools: map[string]string{"IPv4": "clusterip-ipv4", "IPv6": "clusterip-ipv6"}, NodePortPool: "nodeport"}}
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /v1/services/{ns}/{name}", f.put)
	mux.HandleFunc("GET /v1/services/{ns}/{name}", f.get)
	mux.HandleFunc("DELETE /v1/services/{ns}/{name}", f.delete)
	mux.HandleFunc("GET /v1/services", f.list)
	mux.HandleFunc("GET /v1/service-network", func(w http.ResponseWriter, _ *http.Request) { reply(w, 200, f.network) })
	mux.HandleFunc("PUT /v1/service-network", func(w http.ResponseWriter, r *http.Request) {
		require.NoError(t, decodeStrict(f.lastBody(r), &f.network))
		reply(w, 200, f.network)
	})
	mux.HandleFunc("POST /v1/reconcile", f.reconcile)
	mux.HandleFunc("POST /v1/import", func(w http.ResponseWriter, r *http.Request) {
		var req types.ImportRequest
		require.NoError(t, decodeStrict(f.lastBody(r), &req))
		f.imported = &req
		reply(w, 200, types.ImportResult{Services: len(req.Services), Values: 7, Revision: 42})
	})
	srv := httptest.NewServer(f.record(mux))
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func (f *fakeAPI) record(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		defer f.mu.Unlock()
		req := r.Method + " " + r.URL.Path
		if r.URL.RawQuery != "" {
			req += "?" + r.URL.RawQuery
		}
		f.reqs = append(f.reqs, req)
		if len(body) > 0 {
			f.bodies[r.Method+" "+r.URL.Path] = append(f.bodies[r.Method+" "+r.URL.Path], body)
		}
		next.ServeHTTP(w, r)
	})
}

// lastBody is the body of r; record has kept it (the lock is held).
func (f *fakeAPI) lastBody(r *http.Request) json.RawMessage {
	b := f.bodies[r.Method+" "+r.URL.Path]
	return b[len(b)-1]
}

func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func notFound(w http.ResponseWriter, key string) {
	reply(w, 404, types.ErrorBody{Error: types.ErrorDetail{Code: "ServiceNotFound", Message: "services " + key + " not found"}})
}

func (f *fakeAPI) put(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("ns") + "/" + r.PathValue("name")
	if e, ok := f.fail["PUT "+key]; ok {
		reply(w, 422, types.ErrorBody{Error: e})
		return
	}
	var s types.Service
	require.NoError(f.t, decodeStrict(f.lastBody(r), &s))
	s.Namespace, s.Name = r.PathValue("ns"), r.PathValue("name")
	old, exists := f.svcs[key]
	if len(s.ClusterIPs) == 0 && exists { // filled from the stored object
		s.ClusterIP, s.ClusterIPs = old.ClusterIP, old.ClusterIPs
	}
	if len(s.ClusterIPs) == 0 && s.Type != "ExternalName" {
		s.ClusterIPs = []string{fmt.Sprintf("10.96.0.%d", 100+len(f.svcs))}
		s.ClusterIP = s.ClusterIPs[0]
	}
	for i := range s.Ports {
		if s.Type == "NodePort" && s.Ports[i].NodePort == 0 {
			s.Ports[i].NodePort = int32(30100 + i)
		}
	}
	s.Revision = f.rev + 1
	if exists && sameService(old, s) {
		s.Revision = old.Revision
	} else if r.URL.Query().Get("dryRun") != "true" {
		f.rev++
		f.svcs[key] = s
	}
	status := 200
	if !exists {
		status = 201
	}
	reply(w, status, s)
}

func (f *fakeAPI) get(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("ns") + "/" + r.PathValue("name")
	s, ok := f.svcs[key]
	if !ok {
		notFound(w, key)
		return
	}
	reply(w, 200, s)
}

func (f *fakeAPI) delete(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("ns") + "/" + r.PathValue("name")
	s, ok := f.svcs[key]
	if !ok {
		notFound(w, key)
		return
	}
	if r.URL.Query().Get("dryRun") != "true" {
		delete(f.svcs, key)
		f.rev++
	}
	reply(w, 200, s)
}

func (f *fakeAPI) list(w http.ResponseWriter, r *http.Request) {
	out := types.ServiceList{Services: []types.Service{}, Revision: f.rev}
	for _, s := range f.svcs {
		if ns := r.URL.Query().Get("namespace"); ns == "" || ns == s.Namespace {
			out.Services = append(out.Services, s)
		}
	}
	reply(w, 200, out)
}

func (f *fakeAPI) reconcile(w http.ResponseWriter, r *http.Request) {
	var req types.ReconcileRequest
	require.NoError(f.t, decodeStrict(f.lastBody(r), &req))
	fs := append([]types.Finding{}, f.findings...)
	for i := range fs {
		fs[i].Repaired = req.Mode == types.ReconcileModeRepair && fs[i].Type == types.FindingLeak
	}
	reply(w, 200, types.ReconcileReport{Mode: req.Mode, Revision: f.rev, Findings: fs})
}

// requests returns the requests made since the last call.
func (f *fakeAPI) requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.reqs
	f.reqs = nil
	return out
}

// body returns the n-th body sent with "METHOD path".
func (f *fakeAPI) body(t *testing.T, req string, n int, v any) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Greater(t, len(f.bodies[req]), n, "no body %d of %s", n, req)
	require.NoError(t, json.Unmarshal(f.bodies[req][n], v))
}

// cli runs the command line against addr with stdin, returning stdout.
func cli(t *testing.T, addr, stdin string, args ...string) (string, error) {
	t.Helper()
	root := newRoot()
	var out, errb bytes.Buffer
	root.SetArgs(append(args, "--addr", addr))
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetIn(strings.NewReader(stdin))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := root.ExecuteContext(ctx)
	return out.String(), err
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

const (
	webJSON = `{"apiVersion":"v1","kind":"Service","metadata":{"name":"web","namespace":"shop"},
	"spec":{"type":"NodePort","selector":{"app":"web"},"ports":[{"name":"http","port":80,"targetPort":8080,"protocol":"TCP"}]}}`
	apiJSON = `{"apiVersion":"v1","kind":"Service","metadata":{"name":"kubernetes","namespace":"default","uid":"u1"},
	"spec":{"clusterIP":"10.96.0.1","clusterIPs":["10.96.0.1"],"ports":[{"name":"https","port":443,"protocol":"TCP","targetPort":6443}]}}`
	twoJSON = `{"kind":"List","items":[` + apiJSON + `,` + webJSON + `]}`
)

// TestServicesApply: each Service of the file is read, created, then left
// unchanged, then updated; --dry-run asks with dryRun=true.
func TestServicesApply(t *testing.T) {
	f, addr := newFakeAPI(t)
	file := writeFile(t, "svcs.json", twoJSON)

	out, err := cli(t, addr, "", "services", "apply", "-f", file)
	require.NoError(t, err)
	assert.Equal(t, []string{"GET /v1/services/default/kubernetes", "PUT /v1/services/default/kubernetes",
		"GET /v1/services/shop/web", "PUT /v1/services/shop/web"}, f.requests())
	var api, web types.Service
	f.body(t, "PUT /v1/services/default/kubernetes", 0, &api)
	assert.Equal(t, types.Service{Namespace: "default", Name: "kubernetes", UID: "u1", Type: "ClusterIP", ClusterIP: "10.96.0.1",
		ClusterIPs: []string{"10.96.0.1"}, HasSelector: new(bool), Ports: []types.ServicePort{{Name: "https", Protocol: "TCP", Port: 443}}}, api)
	f.body(t, "PUT /v1/services/shop/web", 0, &web)
	assert.True(t, *web.HasSelector)
	assert.Regexp(t, `default\s+kubernetes\s+ClusterIP\s+10.96.0.1\s+443/TCP\s+<none>\s+11\s+created`, out)
	assert.Regexp(t, `shop\s+web\s+NodePort\s+10.96.0.101\s+80:30100/TCP\s+<none>\s+12\s+created`, out)

	out, err = cli(t, addr, twoJSON, "services", "apply", "-f", "-")
	require.NoError(t, err, "from standard input")
	assert.Regexp(t, `kubernetes .* 11\s+unchanged`, out)
	assert.Regexp(t, `web .* 12\s+unchanged`, out)

	changed := strings.Replace(webJSON, `"type":"NodePort"`, `"type":"ClusterIP"`, 1)
	out, err = cli(t, addr, changed, "services", "apply", "-f", "-", "--dry-run", "-o", "json")
	require.NoError(t, err)
	assert.Equal(t, []string{"GET /v1/services/shop/web", "PUT /v1/services/shop/web?dryRun=true"}, f.requests()[4:])
	var res struct{ Results []serviceRow }
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.Len(t, res.Results, 1)
	assert.Equal(t, "updated (dry run)", res.Results[0].Result)
	assert.Equal(t, "ClusterIP", res.Results[0].Service.Type)
	assert.Equal(t, "NodePort", f.svcs["shop/web"].Type, "a dry run changes nothing")

	out, err = cli(t, addr, changed, "services", "apply", "-f", "-")
	require.NoError(t, err)
	assert.Regexp(t, `shop\s+web\s+ClusterIP\s+.*80/TCP\s+<none>\s+13\s+updated`, out)
}

// TestServicesApplyErrors: a bad file is named before anything is sent; a
// refused Service is named with the server's code, field and message,
// after the Services already written are printed.
func TestServicesApplyErrors(t *testing.T) {
	f, addr := newFakeAPI(t)
	cases := []struct {
		name  string
		args  []string
		stdin string
		want  string
	}{
		{"no file", []string{"services", "apply"}, "", `required flag(s) "filename" not set`},
		{"missing file", []string{"services", "apply", "-f", "/nonexistent/svcs.json"}, "", "-f: open /nonexistent/svcs.json: no such file"},
		{"YAML", []string{"services", "apply", "-f", "-"}, "kind: Service\n", "-f -: not JSON (YAML is not read"},
		{"no name", []string{"services", "apply", "-f", "-"}, `[` + webJSON + `,{"kind":"Service","spec":{}}]`, "item 1: has no metadata.name"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := cli(t, addr, c.stdin, c.args...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
			assert.Empty(t, f.requests(), "nothing is sent")
		})
	}

	f.fail["PUT shop/web"] = types.ErrorDetail{Code: "Invalid", Message: "provided port is already allocated",
		Details: map[string]any{"field": "spec.ports[0].nodePort"}}
	out, err := cli(t, addr, twoJSON, "services", "apply", "-f", "-")
	require.EqualError(t, err, "shop/web: Invalid: spec.ports[0].nodePort: provided port is already allocated")
	assert.Contains(t, out, "kubernetes", "the Service written before the refusal is printed")
}

func TestServicesGetListDelete(t *testing.T) {
	f, addr := newFakeAPI(t)
	_, err := cli(t, addr, twoJSON, "services", "apply", "-f", "-")
	require.NoError(t, err)
	f.requests()

	out, err := cli(t, addr, "", "services", "get", "shop/web", "-o", "json")
	require.NoError(t, err)
	var s types.Service
	require.NoError(t, json.Unmarshal([]byte(out), &s))
	assert.Equal(t, f.svcs["shop/web"], s)

	out, err = cli(t, addr, "", "services", "list", "--namespace", "shop")
	require.NoError(t, err)
	assert.Regexp(t, `NAMESPACE\s+NAME\s+TYPE\s+CLUSTER-IPS\s+PORTS\s+HEALTH-CHECK\s+REVISION\n`, out)
	assert.Contains(t, out, "1 service at revision 12")
	assert.NotContains(t, out, "kubernetes")

	_, err = cli(t, addr, "", "services", "-n", "default", "--consistency", "stale")
	require.NoError(t, err, "services alone lists")

	out, err = cli(t, addr, "", "services", "delete", "shop/web", "--dry-run")
	require.NoError(t, err)
	assert.Regexp(t, `shop\s+web\s+NodePort.*deleted \(dry run\)`, out)
	_, err = cli(t, addr, "", "services", "delete", "shop/web")
	require.NoError(t, err)
	assert.Equal(t, []string{"GET /v1/services/shop/web?consistency=linearizable", "GET /v1/services?consistency=linearizable&namespace=shop",
		"GET /v1/services?consistency=stale&namespace=default",
		"DELETE /v1/services/shop/web?dryRun=true", "DELETE /v1/services/shop/web"}, f.requests())

	_, err = cli(t, addr, "", "services", "get", "shop/web")
	require.EqualError(t, err, "ServiceNotFound: services shop/web not found")
	for _, arg := range []string{"web", "/web", "shop/", "a/b/c"} {
		_, err = cli(t, addr, "", "services", "get", arg)
		require.EqualError(t, err, fmt.Sprintf("%q: want NAMESPACE/NAME, such as default/web", arg))
	}
}

func TestServiceNetwork(t *testing.T) {
	f, addr := newFakeAPI(t)
	out, err := cli(t, addr, "", "services", "network")
	require.NoError(t, err)
	assert.Regexp(t, `FAMILIES\s+IPv4,IPv6\nIPv4 POOL\s+clusterip-ipv4\nIPv6 POOL\s+clusterip-ipv6\nNODE PORT POOL\s+nodeport\n`, out)

	cases := []struct {
		name    string
		args    []string
		want    types.ServiceNetwork
		wantErr string
	}{
		{"IPv6 primary, the pools kept", []string{"--families", "IPv6,IPv4"},
			types.ServiceNetwork{IPFamilies: []string{"IPv6", "IPv4"}, Pools: map[string]string{"IPv4": "clusterip-ipv4", "IPv6": "clusterip-ipv6"}, NodePortPool: "nodeport"}, ""},
		{"IPv4 only drops the IPv6 pool", []string{"--families", "IPv4", "--node-port-pool", "np2"},
			types.ServiceNetwork{IPFamilies: []string{"IPv4"}, Pools: map[string]string{"IPv4": "clusterip-ipv4"}, NodePortPool: "np2"}, ""},
		{"everything", []string{"--families", "IPv4,IPv6", "--pool", "IPv4=a", "--pool", "IPv6=b", "--node-port-pool", "nodeport"},
			types.ServiceNetwork{IPFamilies: []string{"IPv4", "IPv6"}, Pools: map[string]string{"IPv4": "a", "IPv6": "b"}, NodePortPool: "nodeport"}, ""},
		{"nothing", nil, types.ServiceNetwork{}, "nothing to set"},
		{"a bad family", []string{"--families", "IPv4,ipv6"}, types.ServiceNetwork{}, `--families "IPv4,ipv6": want IPv4 and/or IPv6`},
		{"a bad pool", []string{"--pool", "IPv4:a"}, types.ServiceNetwork{}, `--pool "IPv4:a": want FAMILY=POOL`},
		{"a pool twice", []string{"--pool", "IPv4=a", "--pool", "IPv4=b"}, types.ServiceNetwork{}, `--pool "IPv4=b": IPv4 is named twice`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f.requests()
			_, err := cli(t, addr, "", append([]string{"services", "network", "set"}, c.args...)...)
			if c.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), c.wantErr)
				assert.Empty(t, f.requests())
				return
			}
			require.NoError(t, err)
			assert.Equal(t, []string{"GET /v1/service-network", "PUT /v1/service-network"}, f.requests())
			var got types.ServiceNetwork
			f.body(t, "PUT /v1/service-network", len(f.bodies["PUT /v1/service-network"])-1, &got)
			assert.Equal(t, c.want, got)
		})
	}
}

var leak = types.Finding{Type: types.FindingLeak, Pool: "nodeport", Value: "30007", Owner: "services/old/gone",
	Reason: "PortNotAllocated", Message: "Port 30007 appears to have leaked: cleaning up"}
var missing = types.Finding{Type: types.FindingMissing, Pool: "clusterip-ipv4", Value: "10.96.0.1", Service: "default/kubernetes",
	Reason: "ClusterIPNotAllocated", Message: "Cluster IP [IPv4]:10.96.0.1 is not allocated; repairing"}

// TestReconcile: the fence and the Services sent, the findings printed,
// and the exit status 3 while findings remain.
func TestReconcile(t *testing.T) {
	f, addr := newFakeAPI(t)
	_, err := cli(t, addr, twoJSON, "services", "apply", "-f", "-")
	require.NoError(t, err)
	file := writeFile(t, "svcs.json", twoJSON)
	cases := []struct {
		name      string
		args      []string
		findings  []types.Finding
		wantReqs  []string
		wantFence uint64
		wantMode  string
		wantSvcs  int
		wantOut   []string // regexps of the output
		wantErr   string
		wantExit  int // 0: no exitError
	}{
		{"the cluster's own Services, none found", nil, nil,
			[]string{"GET /v1/services", "POST /v1/reconcile"}, 12, "report", 2,
			[]string{`^0 findings in 2 services, fence 12, revision 12, report, in \d+m?s\n$`}, "", 0},
		{"findings remain", nil, []types.Finding{leak, missing},
			[]string{"GET /v1/services", "POST /v1/reconcile"}, 12, "report", 2,
			[]string{`TYPE\s+POOL\s+VALUE\s+SERVICE\s+OWNER\s+REASON\s+REPAIRED\n`,
				`leak\s+nodeport\s+30007\s+<none>\s+services/old/gone\s+PortNotAllocated\s+false\n`,
				`missing\s+clusterip-ipv4\s+10.96.0.1\s+default/kubernetes\s+<none>\s+ClusterIPNotAllocated\s+false\n`,
				`2 findings \(1 leak, 1 missing\) in 2 services, fence 12`}, "2 findings remain", 3},
		{"repair, a finding remains", []string{"--repair"}, []types.Finding{leak, missing},
			[]string{"GET /v1/services", "POST /v1/reconcile"}, 12, "repair", 2,
			[]string{`leak .* true\n`, `repair, in .*; 1 repaired`}, "1 finding remains", 3},
		{"repair, every finding repaired", []string{"--repair"}, []types.Finding{leak},
			[]string{"GET /v1/services", "POST /v1/reconcile"}, 12, "repair", 2, []string{`; 1 repaired`}, "", 0},
		{"a file, report: the fence is now", []string{"--services", file}, nil,
			[]string{"GET /v1/services", "POST /v1/reconcile"}, 12, "report", 2, nil, "", 0},
		{"a file with a fence", []string{"--services", file, "--fence", "7", "--repair"}, nil,
			[]string{"POST /v1/reconcile"}, 7, "repair", 2, []string{`fence 7`}, "", 0},
		{"repair of a file needs a fence", []string{"--services", file, "--repair"}, nil, nil, 0, "", 0, nil,
			"--repair with --services needs --fence", 0},
		{"a fence needs a file", []string{"--fence", "3"}, nil, nil, 0, "", 0, nil, "--fence goes with --services", 0},
		{"a bad file", []string{"--services", "/nonexistent"}, nil, nil, 0, "", 0, nil, "--services: open /nonexistent", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f.requests()
			f.findings = c.findings
			n := len(f.bodies["POST /v1/reconcile"])
			out, err := cli(t, addr, "", append([]string{"reconcile"}, c.args...)...)
			switch {
			case c.wantExit != 0:
				var xe *exitError
				require.ErrorAs(t, err, &xe)
				assert.Equal(t, c.wantExit, xe.code)
				assert.Equal(t, c.wantErr, xe.msg)
			case c.wantErr != "":
				require.Error(t, err)
				assert.Contains(t, err.Error(), c.wantErr)
			default:
				require.NoError(t, err)
			}
			assert.Equal(t, c.wantReqs, f.requests())
			if c.wantReqs == nil {
				return
			}
			var req types.ReconcileRequest
			f.body(t, "POST /v1/reconcile", n, &req)
			assert.Equal(t, c.wantFence, req.Fence)
			assert.Equal(t, c.wantMode, req.Mode)
			assert.Len(t, req.Services, c.wantSvcs)
			for _, re := range c.wantOut {
				assert.Regexp(t, re, out)
			}
		})
	}

	f.findings = []types.Finding{leak}
	out, err := cli(t, addr, "", "reconcile", "-o", "json")
	var xe *exitError
	require.ErrorAs(t, err, &xe, "-o json exits 3 too")
	var rep types.ReconcileReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	assert.Equal(t, []types.Finding{leak}, rep.Findings)
}

func TestImport(t *testing.T) {
	f, addr := newFakeAPI(t)
	svcs := writeFile(t, "svcs.json", twoJSON)
	ras := writeFile(t, "ras.json", `{"kind":"List","items":[{"kind":"RangeAllocation","metadata":{"name":"clusterip-ipv4"},
		"range":"10.96.0.0/16","data":"AgE="}]}`)
	out, err := cli(t, addr, "", "import", "--services", svcs, "--rangeallocations", ras, "--idempotency-key", "imp-1")
	require.NoError(t, err)
	assert.Regexp(t, `^imported 2 services and 7 values \(1 RangeAllocations\) at revision 42 in \d+m?s\n$`, out)
	assert.Equal(t, []string{"POST /v1/import"}, f.requests())
	require.NotNil(t, f.imported)
	assert.Len(t, f.imported.Services, 2)
	assert.Equal(t, "shop/web", f.imported.Services[1].Namespace+"/"+f.imported.Services[1].Name)
	assert.Equal(t, []types.RangeAllocation{{APIVersion: "v1", Kind: "RangeAllocation", Metadata: types.ObjectMetadata{Name: "clusterip-ipv4"},
		Range: "10.96.0.0/16", Data: []byte{2, 1}}}, f.imported.RangeAllocations)

	out, err = cli(t, addr, twoJSON, "import", "--services", "-", "-o", "json")
	require.NoError(t, err)
	assert.JSONEq(t, `{"services":2,"values":7,"revision":42}`, out)
	f.requests()

	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no --services", nil, `required flag(s) "services" not set`},
		{"missing file", []string{"--services", "/nonexistent.json"}, "--services: open /nonexistent.json: no such file"},
		{"not JSON", []string{"--services", writeFile(t, "s.yaml", "items:\n- kind: Service\n")}, "not JSON"},
		{"no name", []string{"--services", writeFile(t, "s.json", `{"kind":"List","items":[{"spec":{}}]}`)}, "item 0: has no metadata.name"},
		{"nothing", []string{"--services", writeFile(t, "e.json", `{"kind":"List","items":[]}`)}, "no Services to import"},
		{"bad RangeAllocations", []string{"--services", svcs, "--rangeallocations", writeFile(t, "r.json", `[{"metadata":{"name":"np"}}]`)},
			"item 0 (np): has no range"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := cli(t, addr, "", append([]string{"import"}, c.args...)...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
			assert.Empty(t, f.requests(), "nothing is sent")
		})
	}
}
