package api

import (
	"context"
	"fmt"
	"net/http"

	"github.com/rangealloc/rangealloc/api/types"
	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/node"
	"github.com/rangealloc/rangealloc/service"
)

// toSpec converts a Service body to the planner's spec. The singular
// clusterIP goes along as given: the node folds it into clusterIPs, on an
// update against the stored Service (node.PutService).
func toSpec(s types.Service) service.Spec {
	spec := service.Spec{Namespace: s.Namespace, Name: s.Name, UID: s.UID, Type: s.Type, ClusterIPs: s.ClusterIPs, ClusterIP: s.ClusterIP,
		IPFamilyPolicy: s.IPFamilyPolicy, HasSelector: s.HasSelector, ExternalTrafficPolicy: s.ExternalTrafficPolicy,
		HealthCheckNodePort: s.HealthCheckNodePort, AllocateLoadBalancerNodePorts: s.AllocateLoadBalancerNodePorts}
	for _, f := range s.IPFamilies {
		spec.IPFamilies = append(spec.IPFamilies, service.Family(f))
	}
	for _, p := range s.Ports {
		spec.Ports = append(spec.Ports, service.Port{Name: p.Name, Protocol: p.Protocol, Port: p.Port, NodePort: p.NodePort})
	}
	return spec
}

// toSpecs converts the Services of a reconcile or an import.
func toSpecs(list []types.Service) []service.Spec {
	out := make([]service.Spec, 0, len(list))
	for _, s := range list {
		out = append(out, toSpec(s))
	}
	return out
}

// toService converts a stored Service to its JSON form.
func toService(r node.ServiceRecord) types.Service {
	s := r.Spec
	out := types.Service{Namespace: s.Namespace, Name: s.Name, UID: s.UID, Type: s.Type, ClusterIPs: s.ClusterIPs,
		IPFamilyPolicy: s.IPFamilyPolicy, HasSelector: s.HasSelector, ExternalTrafficPolicy: s.ExternalTrafficPolicy,
		HealthCheckNodePort: s.HealthCheckNodePort, AllocateLoadBalancerNodePorts: s.AllocateLoadBalancerNodePorts, Revision: r.Revision}
	if len(s.ClusterIPs) > 0 {
		out.ClusterIP = s.ClusterIPs[0]
	}
	for _, f := range s.IPFamilies {
		out.IPFamilies = append(out.IPFamilies, string(f))
	}
	for _, p := range s.Ports {
		out.Ports = append(out.Ports, types.ServicePort{Name: p.Name, Protocol: p.Protocol, Port: p.Port, NodePort: p.NodePort})
	}
	return out
}

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
		spec = toSpec(body)
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
	writeJSON(w, status, toService(res.ServiceRecord))
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
	writeJSON(w, http.StatusOK, toService(rec))
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
	writeJSON(w, http.StatusOK, toService(rec))
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
		out.Services = append(out.Services, toService(rec))
	}
	writeJSON(w, http.StatusOK, out)
}

func toNetwork(sn fsm.ServiceNetwork) types.ServiceNetwork {
	out := types.ServiceNetwork{IPFamilies: []string{}, Pools: map[string]string{}, NodePortPool: sn.NodePortPool}
	for _, f := range sn.Families {
		out.IPFamilies = append(out.IPFamilies, string(f))
		out.Pools[string(f)] = sn.Pool(f)
	}
	return out
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
	writeJSON(w, http.StatusOK, toNetwork(sn))
}

func (srv *Server) putServiceNetwork(w http.ResponseWriter, r *http.Request) {
	var body types.ServiceNetwork
	key, err := idempotencyKey(r)
	if err == nil {
		err = decode(w, r, &body, false)
	}
	sn := fsm.ServiceNetwork{NodePortPool: body.NodePortPool}
	for _, f := range body.IPFamilies {
		sn.Families = append(sn.Families, service.Family(f))
	}
	for f, p := range body.Pools {
		switch service.Family(f) {
		case service.IPv4:
			sn.IPv4Pool = p
		case service.IPv6:
			sn.IPv6Pool = p
		default:
			if err == nil {
				err = badRequest(fmt.Sprintf("pools: key %q: want IPv4 or IPv6", f))
			}
		}
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
	writeJSON(w, http.StatusOK, toNetwork(sn))
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
		listed = toSpecs(body.Services)
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
		specs = toSpecs(body.Services)
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
