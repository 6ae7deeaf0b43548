package api

import (
	"context"
	"fmt"
	"net/http"

	"github.com/rangealloc/rangealloc/api/types"
	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/internal/convert"
	"github.com/rangealloc/rangealloc/node"
	"github.com/rangealloc/rangealloc/service"
)

// dryRun reads ?dryRun: "true" or "All" (kubectl's spelling) ask for one.
func dryRun(r *http.Request) (bool, error) {
	switch v := r.URL.Query().Get("dryRun"); v {
	case "", "false":
		return false, nil
	case "true", "All":
		return true, nil
	default:
		return false, badRequest(fmt.Sprintf("dryRun %q: want true or false", v))
	}
}

// servicePath checks that a body's namespace and name, when given, are
// the path's, and fills them in.
func servicePath(r *http.Request, s *types.Service) error {
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	if (s.Namespace != "" && s.Namespace != ns) || (s.Name != "" && s.Name != name) {
		return badRequest(fmt.Sprintf("the body names Service %s/%s, the path %s/%s", s.Namespace, s.Name, ns, name))
	}
	s.Namespace, s.Name = ns, name
	return nil
}

func (srv *Server) putService(w http.ResponseWriter, r *http.Request) {
	var body types.Service
	key, err := idempotencyKey(r)
	if err == nil {
		err = decode(w, r, &body, false)
	}
	if err == nil {
		err = servicePath(r, &body)
	}
	dry, derr := dryRun(r)
	if err == nil {
		err = derr
	}
	var spec service.Spec
	if err == nil {
		spec = convert.Spec(body)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := srv.ctx(r)
	defer cancel()
	res, err := srv.s.PutService(ctx, spec, dry, key)
	if err != nil {
		writeError(w, err)
		return
	}
	status := http.StatusOK
	if res.Created {
		status = http.StatusCreated
	}
	writeJSON(w, status, convert.Service(res.ServiceRecord))
}

func (srv *Server) getService(w http.ResponseWriter, r *http.Request) {
	c, err := consistency(w, r, srv.s)
	if err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := srv.ctx(r)
	defer cancel()
	rec, err := srv.s.Service(ctx, c, r.PathValue("namespace"), r.PathValue("name"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, convert.Service(rec))
}

func (srv *Server) deleteService(w http.ResponseWriter, r *http.Request) {
	key, err := idempotencyKey(r)
	dry, derr := dryRun(r)
	if err == nil {
		err = derr
	}
	if err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := srv.ctx(r)
	defer cancel()
	rec, err := srv.s.DeleteService(ctx, r.PathValue("namespace"), r.PathValue("name"), dry, key)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, convert.Service(rec))
}

func (srv *Server) listServices(w http.ResponseWriter, r *http.Request) {
	c, err := consistency(w, r, srv.s)
	if err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := srv.ctx(r)
	defer cancel()
	recs, rev, err := srv.s.Services(ctx, c, r.URL.Query().Get("namespace"))
	if err != nil {
		writeError(w, err)
		return
	}
	out := types.ServiceList{Services: make([]types.Service, 0, len(recs)), Revision: rev}
	for _, rec := range recs {
		out.Services = append(out.Services, convert.Service(rec))
	}
	writeJSON(w, http.StatusOK, out)
}

func (srv *Server) getServiceNetwork(w http.ResponseWriter, r *http.Request) {
	c, err := consistency(w, r, srv.s)
	if err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := srv.ctx(r)
	defer cancel()
	sn, err := srv.s.ServiceNetwork(ctx, c)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, convert.Network(sn))
}

func (srv *Server) putServiceNetwork(w http.ResponseWriter, r *http.Request) {
	var body types.ServiceNetwork
	key, err := idempotencyKey(r)
	if err == nil {
		err = decode(w, r, &body, false)
	}
	var sn fsm.ServiceNetwork
	if err == nil {
		sn, err = convert.FromNetwork(body)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := srv.ctx(r)
	defer cancel()
	if err := srv.s.SetServiceNetwork(ctx, sn, key); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, convert.Network(sn))
}

func (srv *Server) reconcile(w http.ResponseWriter, r *http.Request) {
	var body types.ReconcileRequest
	key, err := idempotencyKey(r)
	if err == nil {
		err = decodeLimit(w, r, &body, false, MaxServicesBody)
	}
	if err == nil && body.Mode != "" && body.Mode != types.ReconcileModeReport && body.Mode != types.ReconcileModeRepair {
		err = badRequest(fmt.Sprintf(`mode %q: want "report" or "repair"`, body.Mode))
	}
	var listed []service.Spec
	if err == nil {
		listed = convert.Specs(body.Services)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	repair := body.Mode == types.ReconcileModeRepair
	ctx, cancel := context.WithTimeout(r.Context(), 6*srv.opts.Timeout)
	defer cancel()
	findings, rev, err := srv.s.Reconcile(ctx, body.Fence, listed, repair, key)
	if err != nil {
		writeError(w, err)
		return
	}
	out := types.ReconcileReport{Mode: types.ReconcileModeReport, Revision: rev, Findings: make([]types.Finding, 0, len(findings))}
	if repair {
		out.Mode = types.ReconcileModeRepair
	}
	for _, f := range findings {
		out.Findings = append(out.Findings, types.Finding(f))
		if srv.metrics != nil {
			srv.metrics.reconcileFindings.WithLabelValues(f.Pool, f.Type).Inc()
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (srv *Server) importServices(w http.ResponseWriter, r *http.Request) {
	var body types.ImportRequest
	key, err := idempotencyKey(r)
	if err == nil {
		err = decodeLimit(w, r, &body, false, MaxServicesBody)
	}
	var specs []service.Spec
	if err == nil {
		specs = convert.Specs(body.Services)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	ras := make([]node.RangeAllocation, 0, len(body.RangeAllocations))
	for _, ra := range body.RangeAllocations {
		ras = append(ras, node.RangeAllocation{Range: ra.Range, Data: ra.Data})
	}
	ctx, cancel := context.WithTimeout(r.Context(), 6*srv.opts.Timeout)
	defer cancel()
	res, err := srv.s.Import(ctx, specs, ras, key)
	if err != nil {
		writeErrorOp(w, err, true)
		return
	}
	writeJSON(w, http.StatusOK, types.ImportResult{Services: res.Services, Values: res.Values, Revision: res.Index})
}

// forceRelease reads ?force on a release.
func forceRelease(r *http.Request) (bool, error) {
	switch v := r.URL.Query().Get("force"); v {
	case "", "false":
		return false, nil
	case "true":
		return true, nil
	default:
		return false, badRequest(fmt.Sprintf("force %q: want true or false", v))
	}
}
