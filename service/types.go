package service

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/rangealloc/rangealloc/allocator"
)

// Family is an IP family: "IPv4" or "IPv6".
type Family string

// IP families.
const (
	IPv4 Family = "IPv4"
	IPv6 Family = "IPv6"
)

// Service types, IP family policies, protocols and traffic policies, spelled
// as in the Kubernetes API.
const (
	TypeClusterIP    = "ClusterIP"
	TypeNodePort     = "NodePort"
	TypeLoadBalancer = "LoadBalancer"
	TypeExternalName = "ExternalName"

	SingleStack      = "SingleStack"
	PreferDualStack  = "PreferDualStack"
	RequireDualStack = "RequireDualStack"

	ProtocolTCP  = "TCP"
	ProtocolUDP  = "UDP"
	ProtocolSCTP = "SCTP"

	TrafficCluster = "Cluster"
	TrafficLocal   = "Local"

	// ClusterIPNone in clusterIPs[0] makes a service headless.
	ClusterIPNone = "None"
)

// Port is one entry of spec.ports. NodePort 0 means unset.
type Port struct {
	Name     string `json:"name,omitempty"`
	Protocol string `json:"protocol,omitempty"` // TCP (default), UDP, SCTP
	Port     int32  `json:"port"`
	NodePort int32  `json:"nodePort,omitempty"`
}

// Spec is the part of a Service the allocator cares about. Zero values mean
// unset; PlanWrite applies Kubernetes' defaults. The completed Spec that
// Complete returns is the record to store for the service.
type Spec struct {
	Namespace                     string   `json:"namespace"`
	Name                          string   `json:"name"`
	UID                           string   `json:"uid,omitempty"`
	Type                          string   `json:"type,omitempty"`
	ClusterIPs                    []string `json:"clusterIPs,omitempty"`
	IPFamilies                    []Family `json:"ipFamilies,omitempty"`
	IPFamilyPolicy                string   `json:"ipFamilyPolicy,omitempty"`
	HasSelector                   *bool    `json:"hasSelector,omitempty"` // nil means true
	Ports                         []Port   `json:"ports,omitempty"`
	ExternalTrafficPolicy         string   `json:"externalTrafficPolicy,omitempty"`
	HealthCheckNodePort           int32    `json:"healthCheckNodePort,omitempty"`
	AllocateLoadBalancerNodePorts *bool    `json:"allocateLoadBalancerNodePorts,omitempty"`

	// ClusterIP is the singular clusterIP of a write, as a caller gave it:
	// it stands for clusterIPs[0], as in Kubernetes. It is input only:
	// PlanWrite folds it into ClusterIPs against the stored service
	// (FoldClusterIP without one), and a completed Spec never carries it.
	ClusterIP string `json:"clusterIP,omitempty"`
}

// Network is the service network: its IP families (the first is the
// primary, the cluster's default), a range per family, and the node-port
// range. The ranges only serve range checks and error texts; the planner
// never looks at which values are free.
type Network struct {
	Families  []Family
	IPRanges  map[Family]allocator.Range
	NodePorts allocator.Range
}

// NeedKind says which pool a value belongs to.
type NeedKind uint8

// Kinds of value. NodePort and HealthCheckNodePort share the node-port pool.
const (
	KindClusterIP           NeedKind = 1
	KindNodePort            NeedKind = 2
	KindHealthCheckNodePort NeedKind = 3
)

func (k NeedKind) String() string {
	switch k {
	case KindClusterIP:
		return "ClusterIP"
	case KindNodePort:
		return "NodePort"
	case KindHealthCheckNodePort:
		return "HealthCheckNodePort"
	}
	return fmt.Sprintf("NeedKind(%d)", uint8(k))
}

// Need is one value the written service holds after the write.
type Need struct {
	// Field is the first field that names the value: "spec.clusterIPs[1]",
	// "spec.ports[0].nodePort" or "spec.healthCheckNodePort".
	Field string
	Kind  NeedKind
	// Family is the IP family, for KindClusterIP only; node ports come from
	// the network's node-port pool.
	Family Family
	// Value is the value, or "" for a dynamic pick that Complete fills in.
	Value string
	// Keep is true when the stored record holds Value already: nothing is
	// to be allocated for it.
	Keep bool
	// Index is the clusterIPs index, for KindClusterIP.
	Index int
	// Ports are the spec.ports indexes that carry the value, for
	// KindNodePort (several when TCP and UDP entries share a port number).
	Ports []int
}

// Held is one value a stored record holds.
type Held struct {
	Kind   NeedKind
	Family Family // KindClusterIP only
	Value  string
}

// Plan is what a write does.
type Plan struct {
	// Spec is the defaulted spec with kept and requested values filled in;
	// dynamic ones are still empty (clusterIPs "" or nodePort 0).
	Spec Spec
	// Needs lists every value the service holds after the write.
	Needs []Need
	// Release lists the stored record's values the write gives up.
	Release []Held
}

// Requests returns the Needs that name a value not yet held: the values to
// reserve before any dynamic pick.
func (p Plan) Requests() []Need {
	var out []Need
	for _, n := range p.Needs {
		if !n.Keep && n.Value != "" {
			out = append(out, n)
		}
	}
	return out
}

// Dynamic returns the Needs to pick dynamically, in the order Complete
// expects the picks.
func (p Plan) Dynamic() []Need {
	var out []Need
	for _, n := range p.Needs {
		if n.Value == "" {
			out = append(out, n)
		}
	}
	return out
}

// Error codes, as Kubernetes' field.ErrorType names them.
const (
	CodeInvalid      = "FieldValueInvalid"
	CodeForbidden    = "FieldValueForbidden"
	CodeNotSupported = "FieldValueNotSupported"
	CodeDuplicate    = "FieldValueDuplicate"
	CodeInternal     = "InternalError"
)

// FieldError is one rejected field. Value is the bad value rendered as
// Kubernetes renders it (JSON); for CodeNotSupported, Message is the
// "supported values" list.
type FieldError struct {
	Field   string
	Code    string
	Value   string
	Message string
}

// Error reads like Kubernetes' field error:
// `spec.ipFamilyPolicy: Invalid value: "RequireDualStack": this cluster is
// not configured for dual-stack services`. An internal error reads
// "Internal error occurred: <message>", as a 500 from kube-apiserver does.
func (e FieldError) Error() string {
	switch e.Code {
	case CodeForbidden:
		return fmt.Sprintf("%s: Forbidden: %s", e.Field, e.Message)
	case CodeNotSupported:
		return fmt.Sprintf("%s: Unsupported value: %s: supported values: %s", e.Field, e.Value, e.Message)
	case CodeDuplicate:
		return fmt.Sprintf("%s: Duplicate value: %s", e.Field, e.Value)
	case CodeInternal:
		return "Internal error occurred: " + e.Message
	}
	return fmt.Sprintf("%s: Invalid value: %s: %s", e.Field, e.Value, e.Message)
}

// Errors is what PlanWrite returns for a rejected write: 422 Invalid unless
// it holds one CodeInternal error (500).
type Errors []FieldError

// Error joins the errors as Kubernetes' aggregate does: one error alone, or
// "[a, b]".
func (l Errors) Error() string {
	if len(l) == 1 {
		return l[0].Error()
	}
	s := make([]string, len(l))
	for i, e := range l {
		s[i] = e.Error()
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// render formats a bad value as Kubernetes does: numbers bare, strings
// quoted, lists as JSON.
func render(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func invalid(field string, v any, msg string) FieldError {
	return FieldError{Field: field, Code: CodeInvalid, Value: render(v), Message: msg}
}

func forbidden(field, msg string) FieldError {
	return FieldError{Field: field, Code: CodeForbidden, Message: msg}
}

func notSupported(field string, v any, supported ...string) FieldError {
	q := make([]string, len(supported))
	for i, s := range supported {
		q[i] = render(s)
	}
	return FieldError{Field: field, Code: CodeNotSupported, Value: render(v), Message: strings.Join(q, ", ")}
}

func internal(field, msg string) FieldError {
	return FieldError{Field: field, Code: CodeInternal, Message: msg}
}
