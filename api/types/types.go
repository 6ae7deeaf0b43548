// Package types holds the values of rangealloc's calls: the JSON forms of
// the HTTP API v1 (the bodies of requests and answers, the error body),
// the error every call fails with and its sentinels, and the options of a
// call. The embedding package (github.com/rangealloc/rangealloc) and the
// HTTP client (api/client) both speak in them. It imports nothing but the
// standard library, so a client links neither Raft, bbolt nor Prometheus.
package types

// Limits of list requests.
const (
	DefaultLimit = 1000  // allocations per page when limit is not given
	MaxLimit     = 10000 // the largest limit a list takes
)

// Pool is the JSON form of a pool (SPEC §5.1).
type Pool struct {
	Name    string `json:"name"`
	Kind    string `json:"kind"`
	Family  string `json:"family,omitempty"`
	Range   string `json:"range"`
	First   string `json:"first"`
	Last    string `json:"last"`
	Size    int    `json:"size"`
	Used    int    `json:"used"`
	Free    int    `json:"free"`
	Static  Band   `json:"static"`
	Dynamic Band   `json:"dynamic"`
}

// Band is the JSON form of one band of a pool.
type Band struct {
	First string `json:"first,omitempty"`
	Last  string `json:"last,omitempty"`
	Size  int    `json:"size"`
	Used  int    `json:"used"`
}

// Allocation is the JSON form of an allocation (SPEC §5.2).
type Allocation struct {
	Pool     string `json:"pool"`
	Value    string `json:"value"`
	Owner    string `json:"owner"`
	Band     string `json:"band"`
	Mode     string `json:"mode"`
	Revision uint64 `json:"revision"`
}

// RangeAllocation is Kubernetes' RangeAllocation object for a pool.
type RangeAllocation struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   ObjectMetadata `json:"metadata"`
	Range      string         `json:"range"`
	Data       []byte         `json:"data"` // base64 in JSON
}

// ObjectMetadata is the metadata of a RangeAllocation.
type ObjectMetadata struct {
	Name string `json:"name"`
}

// PoolList is the answer of GET /v1/pools.
type PoolList struct {
	Pools []Pool `json:"pools"`
}

// AllocationList is the answer of a list, a count allocation, or a transaction.
type AllocationList struct {
	Allocations []Allocation `json:"allocations"`
	Next        *string      `json:"next,omitempty"`
}

// TxnResults is the answer of POST /v1/txn.
type TxnResults struct {
	Results []Allocation `json:"results"`
}

// CreatePoolRequest is the body of PUT /v1/pools/{name}.
type CreatePoolRequest struct {
	Range string `json:"range"`
}

// AllocateRequest is the body of POST /v1/pools/{name}/allocations.
type AllocateRequest struct {
	Value string `json:"value,omitempty"`
	Owner string `json:"owner,omitempty"`
	Count *int   `json:"count,omitempty"`
}

// TxnOp is one operation of POST /v1/txn.
type TxnOp struct {
	Op    string `json:"op"`
	Pool  string `json:"pool"`
	Value string `json:"value,omitempty"`
	Owner string `json:"owner,omitempty"`
}

// TxnRequest is the body of POST /v1/txn.
type TxnRequest struct {
	Ops []TxnOp `json:"ops"`
}

// ClusterLeader names the leader in ClusterStatus.
type ClusterLeader struct {
	ID      string `json:"id"`
	APIAddr string `json:"apiAddr"`
}

// ClusterMember is a member in ClusterStatus.
type ClusterMember struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raftAddr"`
	APIAddr  string `json:"apiAddr"`
	Voter    bool   `json:"voter"`
	Leader   bool   `json:"leader"`
	// Health, as the leader sees it. A node that cannot reach the leader
	// knows only itself: for the others healthKnown is false and the
	// fields below it are zero.
	HealthKnown bool `json:"healthKnown"`
	Reachable   bool `json:"reachable"`
	Healthy     bool `json:"healthy"`
	// LastContactMs is how long ago the leader last heard from the member;
	// -1 when it never has.
	LastContactMs int64  `json:"lastContactMs"`
	MatchIndex    uint64 `json:"matchIndex"`
	Lag           uint64 `json:"lag"`
	Version       string `json:"version,omitempty"`
	// FeatureLevel is the highest feature level the member's binary
	// supports; 0 when unknown.
	FeatureLevel  int    `json:"featureLevel"`
	DiskFreeBytes uint64 `json:"diskFreeBytes"`
	DiskLow       bool   `json:"diskLow"`
}

// ClusterStatus is the answer of GET /v1/cluster; ID is the answering node's.
type ClusterStatus struct {
	ID           string        `json:"id"`
	ClusterID    string        `json:"clusterId"`
	Leader       ClusterLeader `json:"leader"`
	Term         uint64        `json:"term"`
	CommitIndex  uint64        `json:"commitIndex"`
	AppliedIndex uint64        `json:"appliedIndex"`
	// FeatureLevel is the cluster's replicated feature level; Version the
	// answering node's release.
	FeatureLevel int             `json:"featureLevel"`
	Version      string          `json:"version"`
	Members      []ClusterMember `json:"members"`
}

// MemberRequest is the body of POST /v1/cluster/members.
type MemberRequest struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raftAddr"`
	APIAddr  string `json:"apiAddr"`
	// Voter false keeps the member a non-voter; absent or true, it is
	// promoted to voter once it has caught up.
	Voter *bool `json:"voter,omitempty"`
}

// TransferRequest is the optional body of POST /v1/cluster/leader-transfer.
type TransferRequest struct {
	ID string `json:"id,omitempty"`
}

// ErrorBody is every error answer: {"error":{...}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is a code, Kubernetes' or rangealloc's message, and details.
type ErrorDetail struct {
	Code    string         `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details,omitempty"`
}

// ServicePort is one entry of a Service's ports. NodePort 0 (or absent)
// means unset.
type ServicePort struct {
	Name     string `json:"name,omitempty"`
	Protocol string `json:"protocol,omitempty"`
	Port     int32  `json:"port"`
	NodePort int32  `json:"nodePort,omitempty"`
}

// Service is the allocation side of a Kubernetes Service: the body of PUT
// /v1/services/{namespace}/{name} and every answer about a Service. In a
// PUT body namespace and name may be left out (the path gives them) and
// revision is ignored.
type Service struct {
	Namespace                     string        `json:"namespace,omitempty"`
	Name                          string        `json:"name,omitempty"`
	UID                           string        `json:"uid,omitempty"`
	Type                          string        `json:"type,omitempty"`
	ClusterIP                     string        `json:"clusterIP,omitempty"`
	ClusterIPs                    []string      `json:"clusterIPs,omitempty"`
	IPFamilies                    []string      `json:"ipFamilies,omitempty"`
	IPFamilyPolicy                string        `json:"ipFamilyPolicy,omitempty"`
	HasSelector                   *bool         `json:"hasSelector,omitempty"`
	Ports                         []ServicePort `json:"ports,omitempty"`
	ExternalTrafficPolicy         string        `json:"externalTrafficPolicy,omitempty"`
	HealthCheckNodePort           int32         `json:"healthCheckNodePort,omitempty"`
	AllocateLoadBalancerNodePorts *bool         `json:"allocateLoadBalancerNodePorts,omitempty"`
	// Revision is the log index of the write that last changed the
	// Service (for a dry run: the index of the entry that answered).
	Revision uint64 `json:"revision,omitempty"`
}

// ServiceList is the answer of GET /v1/services, sorted by namespace and
// name.
type ServiceList struct {
	Services []Service `json:"services"`
	// Revision is the applied log index the list was read at: the fence
	// of a reconcile of these Services.
	Revision uint64 `json:"revision"`
}

// ServiceNetwork is the body and answer of /v1/service-network: the IP
// families Services get (the first is the primary), the pool of each
// family, and the node-port pool.
type ServiceNetwork struct {
	IPFamilies   []string          `json:"ipFamilies"`
	Pools        map[string]string `json:"pools"`
	NodePortPool string            `json:"nodePortPool"`
}

// Reconcile modes.
const (
	ReconcileModeReport = "report"
	ReconcileModeRepair = "repair"
)

// ReconcileRequest is the body of POST /v1/reconcile. Fence is a revision
// the caller read before it listed its Services: no value allocated after
// it is reported as a leak, or released.
type ReconcileRequest struct {
	Fence    uint64    `json:"fence"`
	Services []Service `json:"services"`
	Mode     string    `json:"mode,omitempty"` // "report" (default) or "repair"
}

// Finding types of a reconcile.
const (
	FindingLeak       = "leak"
	FindingMissing    = "missing"
	FindingDuplicate  = "duplicate"
	FindingOutOfRange = "outOfRange"
	FindingMismatch   = "mismatch"
)

// Finding is one disagreement between the listed Services and the pools.
type Finding struct {
	Type  string `json:"type"`
	Pool  string `json:"pool"`
	Value string `json:"value"`
	// Service is the listed Service the finding is about
	// ("namespace/name"), "" for a leak.
	Service string `json:"service,omitempty"`
	// Owner is the value's holder in the pool, when it is held.
	Owner string `json:"owner,omitempty"`
	// Reason is Kubernetes' repair reason: ClusterIPNotAllocated,
	// PortOutOfRange, ...
	Reason  string `json:"reason"`
	Message string `json:"message"`
	// Repaired is true when a repair released or recorded the value.
	Repaired bool `json:"repaired,omitempty"`
}

// ReconcileReport is the answer of POST /v1/reconcile.
type ReconcileReport struct {
	Mode string `json:"mode"`
	// Revision is the state the report describes: the applied index it
	// was computed at, or the index of the repair's entry.
	Revision uint64    `json:"revision"`
	Findings []Finding `json:"findings"`
}

// ImportRequest is the body of POST /v1/import: Services with every value
// filled in, created in one step, and optionally the RangeAllocation
// objects of the cluster they come from, whose values no Service names
// are held by the owner "import".
type ImportRequest struct {
	Services         []Service         `json:"services"`
	RangeAllocations []RangeAllocation `json:"rangeAllocations,omitempty"`
}

// ImportResult is the answer of POST /v1/import.
type ImportResult struct {
	Services int    `json:"services"` // Service records created
	Values   int    `json:"values"`   // values allocated, for Services and "import"
	Revision uint64 `json:"revision"` // the log index of the import
}
