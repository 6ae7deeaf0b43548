package fsm

import (
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strings"

	"github.com/rangealloc/rangealloc/allocator"
	"github.com/rangealloc/rangealloc/internal/limits"
	"github.com/rangealloc/rangealloc/service"
)

// ServiceOwnerPrefix starts the owner of every value a Service holds:
// "services/<namespace>/<name>".
const ServiceOwnerPrefix = "services/"

// ImportOwner holds the values an import found allocated in a
// RangeAllocation that no imported Service names.
const ImportOwner = "import"

// Limits of Service writes, checked in Apply (defined in package limits).
const (
	MaxServicePorts = limits.MaxServicePorts // ports of one Service
	MaxUIDLen       = limits.MaxUIDLen       // a Service's uid
	MaxFieldLen     = limits.MaxFieldLen     // any other string field of a Service
)

// ServiceOwner returns the owner of a Service's values.
func ServiceOwner(namespace, name string) string {
	return ServiceOwnerPrefix + namespace + "/" + name
}

// ServiceNetwork is the replicated service network: the IP families
// Services get (the first is the primary), the pool of each family, and
// the node-port pool.
type ServiceNetwork struct {
	Families     []service.Family
	IPv4Pool     string
	IPv6Pool     string
	NodePortPool string
}

// Set reports whether a network is set.
func (n ServiceNetwork) Set() bool { return len(n.Families) > 0 }

// Pool returns the pool of family f ("" when the network has none).
func (n ServiceNetwork) Pool(f service.Family) string {
	switch f {
	case service.IPv4:
		return n.IPv4Pool
	case service.IPv6:
		return n.IPv6Pool
	}
	return ""
}

// names tells which of the network's pools pool is: "IPv4", "IPv6" or
// "node-port"; "" when it is none of them.
func (n ServiceNetwork) names(pool string) string {
	switch {
	case pool == "":
		return ""
	case pool == n.NodePortPool:
		return "node-port"
	case pool == n.IPv4Pool:
		return string(service.IPv4)
	case pool == n.IPv6Pool:
		return string(service.IPv6)
	}
	return ""
}

// ServiceRecord is a stored Service: the spec as its last write completed
// it, and that write's log index.
type ServiceRecord struct {
	Spec     service.Spec
	Revision uint64
}

// Key returns "namespace/name".
func (r *ServiceRecord) Key() string { return r.Spec.Namespace + "/" + r.Spec.Name }

var (
	dns1123Label = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	dns1035Label = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)
)

// ValidateServiceName checks a Service's namespace (a DNS-1123 label) and
// name (a DNS-1035 label), with Kubernetes' texts.
func ValidateServiceName(namespace, name string) *Error {
	if len(namespace) > limits.MaxNamespace || !dns1123Label.MatchString(namespace) {
		return &Error{Code: CodeInvalid, Op: -1, Field: "metadata.namespace", Message: fmt.Sprintf(
			"metadata.namespace: Invalid value: %q: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')", namespace)}
	}
	if len(name) > limits.MaxServiceName || !dns1035Label.MatchString(name) {
		return &Error{Code: CodeInvalid, Op: -1, Field: "metadata.name", Message: fmt.Sprintf(
			"metadata.name: Invalid value: %q: a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')", name)}
	}
	return nil
}

// checkSpecSize bounds a Service's lists and strings.
func checkSpecSize(s *service.Spec) *Error {
	if len(s.Ports) > MaxServicePorts {
		return &Error{Code: CodeInvalid, Op: -1, Field: "spec.ports", Message: fmt.Sprintf("spec.ports: Too many: %d: must have at most %d items", len(s.Ports), MaxServicePorts)}
	}
	if len(s.UID) > MaxUIDLen {
		return errorf(CodeInvalidArgument, "uid is %d bytes long; at most %d", len(s.UID), MaxUIDLen)
	}
	long := len(s.Type) > MaxFieldLen || len(s.ClusterIP) > MaxFieldLen || len(s.IPFamilyPolicy) > MaxFieldLen || len(s.ExternalTrafficPolicy) > MaxFieldLen ||
		len(s.ClusterIPs) > 2*MaxServicePorts || len(s.IPFamilies) > 2*MaxServicePorts
	for _, x := range s.ClusterIPs {
		long = long || len(x) > MaxFieldLen
	}
	for _, x := range s.IPFamilies {
		long = long || len(x) > MaxFieldLen
	}
	for _, p := range s.Ports {
		long = long || len(p.Name) > MaxFieldLen || len(p.Protocol) > MaxFieldLen
	}
	if long {
		return errorf(CodeInvalidArgument, "a field of the Service is longer than %d bytes", MaxFieldLen)
	}
	return nil
}

// svcNet is the service network resolved against the pools: what the
// planner needs, and the pool of each kind of value.
type svcNet struct {
	net   service.Network
	pools map[service.Family]*pool
	ports *pool
}

// resolveNetwork resolves the service network against the pools.
func (s *state) resolveNetwork() (*svcNet, *Error) {
	n := s.network
	if !n.Set() {
		return nil, errorf(CodeInvalidArgument, "the cluster has no service network: set one with PUT /v1/service-network")
	}
	out := &svcNet{net: service.Network{Families: n.Families, IPRanges: map[service.Family]allocator.Range{}},
		pools: map[service.Family]*pool{}}
	for _, f := range n.Families {
		p := s.pools[n.Pool(f)]
		if p == nil {
			return nil, errorf(CodePoolNotFound, "the service network's %s pool %q does not exist", f, n.Pool(f))
		}
		out.pools[f], out.net.IPRanges[f] = p, p.p.Range()
	}
	if out.ports = s.pools[n.NodePortPool]; out.ports == nil {
		return nil, errorf(CodePoolNotFound, "the service network's node-port pool %q does not exist", n.NodePortPool)
	}
	out.net.NodePorts = out.ports.p.Range()
	return out, nil
}

// networkPool returns the service network's pool of a value of kind k and
// family f, nil when the network names none or the pool is gone.
func (s *state) networkPool(k service.NeedKind, f service.Family) *pool {
	if k == service.KindClusterIP {
		return s.pools[s.network.Pool(f)]
	}
	return s.pools[s.network.NodePortPool]
}

// poolOf returns the pool of a value of kind k and family f.
func (n *svcNet) poolOf(k service.NeedKind, f service.Family) *pool {
	if k == service.KindClusterIP {
		return n.pools[f]
	}
	return n.ports
}

// setNetwork validates and sets the service network. A family's pool or
// the node-port pool may not change, or go, while Services hold values
// in it.
func (s *state) setNetwork(n ServiceNetwork, ifUnset bool) *Result {
	if ifUnset && s.network.Set() {
		return &Result{}
	}
	if err := s.checkNetwork(n); err != nil {
		return &Result{Err: err}
	}
	old := s.network
	for _, f := range []service.Family{service.IPv4, service.IPv6} {
		if p := old.Pool(f); p != "" && p != n.Pool(f) {
			if err := s.poolInUse(p, f); err != nil {
				return &Result{Err: err}
			}
		}
	}
	if old.NodePortPool != "" && old.NodePortPool != n.NodePortPool {
		if err := s.poolInUse(old.NodePortPool, ""); err != nil {
			return &Result{Err: err}
		}
	}
	created := !old.Set()
	n.Families = append([]service.Family(nil), n.Families...)
	s.network = n
	return &Result{Created: created}
}

func (s *state) checkNetwork(n ServiceNetwork) *Error {
	if err := checkNetworkShape(n); err != nil {
		return err
	}
	check := func(what, name string, kind allocator.Kind, family string) *Error {
		p := s.pools[name]
		if p == nil {
			return errorf(CodePoolNotFound, "%s pool %q not found", what, name)
		}
		if r := p.p.Range(); r.Kind() != kind || r.Family() != family {
			want := "a port"
			if family != "" {
				want = "an " + family
			}
			return errorf(CodeInvalidArgument, "%s pool %q has range %s, not %s range", what, name, r, want)
		}
		return nil
	}
	for _, f := range n.Families {
		if err := check(string(f), n.Pool(f), allocator.KindIP, string(f)); err != nil {
			return err
		}
	}
	return check("node-port", n.NodePortPool, allocator.KindPort, "")
}

// checkNetworkShape checks what a service network is on its own: one or
// two distinct families, and a pool named for each family listed and for
// no other. Every network the state holds has this shape; whether its
// pools exist is another matter (checkNetwork): a log written before
// feature level 4 may have deleted one since.
func checkNetworkShape(n ServiceNetwork) *Error {
	if len(n.Families) == 0 || len(n.Families) > limits.MaxFamilies {
		return errorf(CodeInvalidArgument, "a service network has 1 or 2 IP families, got %d", len(n.Families))
	}
	if len(n.Families) == 2 && n.Families[0] == n.Families[1] {
		return errorf(CodeInvalidArgument, "IP family %s is listed twice", n.Families[0])
	}
	for _, f := range n.Families {
		if f != service.IPv4 && f != service.IPv6 {
			return errorf(CodeInvalidArgument, "IP family %q: want IPv4 or IPv6", f)
		}
	}
	for _, f := range []service.Family{service.IPv4, service.IPv6} {
		listed := false
		for _, g := range n.Families {
			listed = listed || g == f
		}
		switch {
		case listed && n.Pool(f) == "":
			return errorf(CodeInvalidArgument, "no pool is named for %s, one of the network's families", f)
		case !listed && n.Pool(f) != "":
			return errorf(CodeInvalidArgument, "a pool is named for %s, which is not one of the network's families", f)
		}
	}
	if n.NodePortPool == "" {
		return errorf(CodeInvalidArgument, "no node-port pool is named")
	}
	return nil
}

// poolInUse refuses a change of the network that would strand Services'
// values in pool name (f: the family, "" for node ports).
func (s *state) poolInUse(name string, f service.Family) *Error {
	n := 0
	for _, r := range s.services { // a count: the order does not matter
		for _, h := range service.PlanDelete(r.Spec) {
			if (f == "" && h.Kind != service.KindClusterIP) || (f != "" && h.Kind == service.KindClusterIP && h.Family == f) {
				n++
				break
			}
		}
	}
	if n > 0 {
		return errorf(CodeInvalidArgument, "%d Services hold values in pool %q: delete them before the service network stops using it", n, name)
	}
	return nil
}

// fieldError turns the planner's error into a result error. The one
// error kube-apiserver calls internal, a requested healthCheckNodePort it
// cannot reserve, is a requested value that is taken or out of range:
// 422 Invalid naming the field from level 4, 400 InvalidArgument before.
func (s *state) fieldError(name string, err error) *Error {
	el, ok := err.(service.Errors)
	if !ok || len(el) == 0 {
		return errorf(CodeInvalidArgument, "%v", err)
	}
	if len(el) == 1 && el[0].Code == service.CodeInternal {
		code := CodeInvalidArgument
		if s.rules.healthCheckInvalid {
			code = CodeInvalid
		}
		return &Error{Code: code, Op: -1, Field: el[0].Field, Message: el[0].Error()}
	}
	return InvalidService(name, el)
}

// InvalidService is the error of a write of Service name that the
// service package's checks refused (err): 422 CodeInvalid naming the
// first field, worded as kube-apiserver words it. An err that is not
// service.Errors is CodeInvalidArgument.
func InvalidService(name string, err error) *Error {
	el, ok := err.(service.Errors)
	if !ok || len(el) == 0 {
		return errorf(CodeInvalidArgument, "%v", err)
	}
	return &Error{Code: CodeInvalid, Op: -1, Field: el[0].Field, Message: fmt.Sprintf("Service %q is invalid: %s", name, el.Error())}
}

// revert undoes steps, newest first.
func revert(undos []undo) {
	for j := len(undos) - 1; j >= 0; j-- {
		u := undos[j]
		if u.rel {
			u.p.putBack(u.off, u.rec)
		} else {
			u.p.free(u.off)
		}
	}
}

// putService applies one Service write: it plans it, takes what the plan
// needs (writePlan), then stores the record. A failure at any step reverts
// the steps before it.
func (s *state) putService(index uint64, r *Request) *Result {
	if r.Service == nil {
		return &Result{Err: errorf(CodeInvalidArgument, "no Service in the request")}
	}
	spec := *r.Service
	if err := ValidateServiceName(spec.Namespace, spec.Name); err != nil {
		return &Result{Err: err}
	}
	if err := checkSpecSize(&spec); err != nil {
		return &Result{Err: err}
	}
	n, nerr := s.resolveNetwork()
	if nerr != nil {
		return &Result{Err: nerr}
	}
	key, owner := spec.Namespace+"/"+spec.Name, ServiceOwner(spec.Namespace, spec.Name)
	stored := s.services[key]
	var storedSpec *service.Spec
	if stored != nil {
		storedSpec = &stored.Spec
		if spec.UID == "" {
			spec.UID = stored.Spec.UID
		}
	}
	plan, err := service.PlanWrite(n.net, storedSpec, spec)
	if err != nil {
		return &Result{Err: s.fieldError(spec.Name, err)}
	}
	created := stored == nil || (spec.UID != "" && stored.Spec.UID != "" && spec.UID != stored.Spec.UID)
	if !created && len(plan.Release) == 0 && len(plan.Dynamic()) == 0 && len(plan.Requests()) == 0 &&
		reflect.DeepEqual(plan.Spec, stored.Spec) {
		rec := *stored
		return &Result{Service: &rec}
	}
	done, freed, undos, e := writePlan(n, &plan, spec.Name, owner, index, r.Seed)
	if e != nil {
		return &Result{Err: e}
	}
	rec := &ServiceRecord{Spec: done, Revision: index}
	if r.DryRun {
		revert(undos)
	} else {
		s.services[key] = rec
		if freed {
			s.freed = index
		}
	}
	out := *rec
	return &Result{Service: &out, Created: created}
}

// writePlan takes what a Service write's plan needs for owner: it reserves
// every requested value, then picks the dynamic ones, then releases what
// the write gives up. It returns the completed spec, whether it freed a
// value, and its steps (a dry run reverts them); on an error it has
// reverted them.
func writePlan(n *svcNet, plan *service.Plan, name, owner string, index, seed uint64) (service.Spec, bool, []undo, *Error) {
	var undos []undo
	fail := func(e *Error) (service.Spec, bool, []undo, *Error) {
		revert(undos)
		return service.Spec{}, false, nil, e
	}
	if e := reserve(n, name, plan, owner, index, &undos); e != nil {
		return fail(e)
	}
	picked, e := pickDynamic(n, plan.Dynamic(), owner, index, seed, &undos)
	if e != nil {
		return fail(e)
	}
	freed := false
	for _, h := range plan.Release {
		if p := n.poolOf(h.Kind, h.Family); p != nil {
			freed = p.releaseOwned(h.Value, owner, ^uint64(0), &undos) || freed
		}
	}
	done, err := service.Complete(*plan, picked)
	if err != nil {
		return fail(errorf(CodeInvalidArgument, "%v", err))
	}
	return done, freed, undos, nil
}

// reserve takes the values plan requests for owner, appending each step to
// *undos. A value out of range or taken fails as kube-apiserver words it
// (requestError); the caller reverts *undos.
func reserve(n *svcNet, name string, plan *service.Plan, owner string, index uint64, undos *[]undo) *Error {
	for _, nd := range plan.Requests() {
		p := n.poolOf(nd.Kind, nd.Family)
		off, e := p.offset(nd.Value)
		if e == nil {
			e = p.allocate(off)
		}
		if e != nil {
			return requestError(name, &plan.Spec, nd, e)
		}
		p.take(off, owner, true, index)
		*undos = append(*undos, undo{p: p, off: off})
	}
	return nil
}

// pickDynamic takes a value for each dynamic need, in order, for owner, each from
// the next random start of seed's sequence, appending each step to *undos.
// It returns the values picked, or RangeFull naming the field of the first
// need whose pool is full; the caller reverts *undos.
func pickDynamic(n *svcNet, dyn []service.Need, owner string, index, seed uint64, undos *[]undo) ([]string, *Error) {
	rnd := seed
	picked := make([]string, 0, len(dyn))
	for _, nd := range dyn {
		p := n.poolOf(nd.Kind, nd.Family)
		off, err := p.p.AllocateNext(splitmix64(&rnd))
		if err != nil { // full
			what := "a nodePort"
			if nd.Kind == service.KindClusterIP {
				what = "a serviceIP"
			}
			return nil, &Error{Code: CodeRangeFull, Op: -1, Field: nd.Field, Message: "failed to allocate " + what + ": range is full"}
		}
		p.take(off, owner, false, index)
		*undos = append(*undos, undo{p: p, off: off})
		picked = append(picked, p.p.Range().Value(off))
	}
	return picked, nil
}

// requestError is the error of a requested value that is out of range or
// taken, as kube-apiserver words it.
func requestError(name string, spec *service.Spec, nd service.Need, e *Error) *Error {
	var fe service.FieldError
	switch nd.Kind {
	case service.KindClusterIP:
		fe = service.FieldError{Field: "spec.clusterIPs", Code: service.CodeInvalid, Value: fmt.Sprintf("%#v", spec.ClusterIPs),
			Message: fmt.Sprintf("failed to allocate IP %s: %s", nd.Value, e.Message)}
	case service.KindHealthCheckNodePort:
		fe = service.FieldError{Field: nd.Field, Code: service.CodeInvalid, Value: nd.Value,
			Message: fmt.Sprintf("failed to allocate requested HealthCheck NodePort %s: %s", nd.Value, e.Message)}
	default:
		fe = service.FieldError{Field: nd.Field, Code: service.CodeInvalid, Value: nd.Value, Message: e.Message}
	}
	return &Error{Code: CodeInvalid, Op: -1, Field: fe.Field, Owner: e.Owner,
		Message: fmt.Sprintf("Service %q is invalid: %s", name, fe.Error())}
}

// releaseOwned frees value if owner holds it and it was allocated at or
// before maxRev; it reports whether it did.
func (p *pool) releaseOwned(value, owner string, maxRev uint64, undos *[]undo) bool {
	off, err := p.offset(value)
	if err != nil || !p.p.HasOffset(off) {
		return false
	}
	rec := p.recs.get(off)
	if rec.owner != owner || rec.revision() > maxRev {
		return false
	}
	p.free(off)
	if undos != nil {
		*undos = append(*undos, undo{p: p, off: off, rec: rec, rel: true})
	}
	return true
}

// deleteService deletes a Service and releases the values it holds.
func (s *state) deleteService(index uint64, r *Request) *Result {
	if r.Service == nil {
		return &Result{Err: errorf(CodeInvalidArgument, "no Service in the request")}
	}
	ns, name := r.Service.Namespace, r.Service.Name
	key := ns + "/" + name
	stored := s.services[key]
	if stored == nil {
		return &Result{Err: errorf(CodeServiceNotFound, "services %q not found", name)}
	}
	// Each value from its own pool: a pool of the network that is gone
	// holds none of them, and must not keep the others held. Below level
	// 4, nothing was released unless the whole network resolved.
	poolOf := s.networkPool
	if !s.rules.releaseWithoutNetwork {
		if n, err := s.resolveNetwork(); err == nil {
			poolOf = n.poolOf
		} else {
			poolOf = nil
		}
	}
	var undos []undo
	if poolOf != nil {
		for _, h := range service.PlanDelete(stored.Spec) {
			if p := poolOf(h.Kind, h.Family); p != nil {
				p.releaseOwned(h.Value, ServiceOwner(ns, name), ^uint64(0), &undos)
			}
		}
	}
	if r.DryRun {
		revert(undos)
	} else {
		delete(s.services, key)
		s.freed = index
	}
	out := *stored
	return &Result{Service: &out}
}

// serviceKeys returns the keys of the stored Services, sorted.
func (s *state) serviceKeys() []string {
	keys := make([]string, 0, len(s.services))
	for k := range s.services {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ownedByService returns the Service key holding a value of owner, or "".
func (s *state) ownedByService(owner string) string {
	if !strings.HasPrefix(owner, ServiceOwnerPrefix) {
		return ""
	}
	key := owner[len(ServiceOwnerPrefix):]
	if s.services[key] == nil {
		return ""
	}
	return key
}

// importServices creates Service records with their named values, and
// holds held for ImportOwner, all or nothing.
func (s *state) importServices(index uint64, r *Request) *Result {
	n, nerr := s.resolveNetwork()
	if nerr != nil {
		return &Result{Err: nerr}
	}
	var undos []undo
	added := map[string]bool{}
	fail := func(i int, e *Error) *Result {
		revert(undos)
		for k := range added { // deletes only: the order does not matter
			delete(s.services, k)
		}
		e.Op = i
		return &Result{Err: e}
	}
	values := 0
	for i := range r.Services {
		spec := r.Services[i]
		if err := ValidateServiceName(spec.Namespace, spec.Name); err != nil {
			return fail(i, err)
		}
		if err := checkSpecSize(&spec); err != nil {
			return fail(i, err)
		}
		key, owner := spec.Namespace+"/"+spec.Name, ServiceOwner(spec.Namespace, spec.Name)
		if s.services[key] != nil {
			return fail(i, errorf(CodeInvalidArgument, "Service %s exists", key))
		}
		plan, err := service.PlanWrite(n.net, nil, spec)
		if err != nil {
			return fail(i, s.fieldError(spec.Name, err))
		}
		if dyn := plan.Dynamic(); len(dyn) > 0 {
			return fail(i, &Error{Code: CodeInvalid, Op: -1, Field: dyn[0].Field,
				Message: fmt.Sprintf("Service %s: %s has no value: an import keeps values, it picks none", key, dyn[0].Field)})
		}
		if e := reserve(n, spec.Name, &plan, owner, index, &undos); e != nil {
			return fail(i, e)
		}
		values += len(plan.Requests())
		s.services[key] = &ServiceRecord{Spec: plan.Spec, Revision: index}
		added[key] = true
	}
	held, e := s.hold(r.Held, index, &undos)
	if e != nil {
		return fail(-1, e)
	}
	return &Result{Count: values + held, Imported: len(added)}
}

// hold takes the held values that are free for ImportOwner, appending each
// step to *undos, and returns how many it took; the caller reverts *undos
// on an error.
func (s *state) hold(held []PoolValues, index uint64, undos *[]undo) (int, *Error) {
	n := 0
	for _, h := range held {
		p := s.pools[h.Pool]
		if p == nil {
			return 0, errorf(CodePoolNotFound, "pool %q not found", h.Pool)
		}
		for _, v := range h.Values {
			off, e := p.offset(v)
			if e != nil {
				return 0, e
			}
			if p.p.AllocateOffset(off) != nil {
				continue // named by an imported Service, or held already
			}
			p.take(off, ImportOwner, true, index)
			*undos = append(*undos, undo{p: p, off: off})
			n++
		}
	}
	return n, nil
}

// Service returns a stored Service.
func (f *FSM) Service(namespace, name string) (ServiceRecord, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	r := f.s.services[namespace+"/"+name]
	if r == nil {
		return ServiceRecord{}, errorf(CodeServiceNotFound, "services %q not found", name)
	}
	return *r, nil
}

// Services returns the stored Services of namespace ("" for every
// namespace), sorted by namespace and name, and the applied index they
// were read at.
func (f *FSM) Services(namespace string) ([]ServiceRecord, uint64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := []ServiceRecord{}
	for _, key := range f.s.serviceKeys() {
		if r := f.s.services[key]; namespace == "" || r.Spec.Namespace == namespace {
			out = append(out, *r)
		}
	}
	return out, f.s.index
}

// ServiceNetwork returns the service network (unset: no families).
func (f *FSM) ServiceNetwork() ServiceNetwork {
	f.mu.RLock()
	defer f.mu.RUnlock()
	n := f.s.network
	n.Families = append([]service.Family(nil), n.Families...)
	return n
}
