package types

// Consistency is how fresh a read must be.
type Consistency string

// The consistency levels of reads.
const (
	// Linearizable reads see every write acknowledged before they began.
	// They are served by the leader after it confirms it still leads.
	Linearizable Consistency = "linearizable"
	// Leader reads are served from the leader's state without that
	// confirmation: a deposed leader may answer from a stale state.
	Leader Consistency = "leader"
	// Stale reads are served from the answering node's own state, without
	// a leader.
	Stale Consistency = "stale"
)

// CallOptions are the options of one call.
type CallOptions struct {
	// IdempotencyKey names a write: a retry with the same key returns the
	// first attempt's result instead of applying the write twice. Empty:
	// the call draws one for its own retries.
	IdempotencyKey string
	// Consistency of a read; empty means Linearizable.
	Consistency Consistency
	// DryRun, for a Service write, answers what the write would do and
	// changes nothing.
	DryRun bool
}

// CallOption sets one of the CallOptions.
type CallOption func(*CallOptions)

// WithIdempotencyKey names a write, so that retrying it is safe.
func WithIdempotencyKey(key string) CallOption {
	return func(o *CallOptions) { o.IdempotencyKey = key }
}

// WithConsistency sets a read's consistency.
func WithConsistency(c Consistency) CallOption {
	return func(o *CallOptions) { o.Consistency = c }
}

// WithDryRun makes a Service write change nothing.
func WithDryRun() CallOption {
	return func(o *CallOptions) { o.DryRun = true }
}

// Resolve applies opts in order to the zero CallOptions.
func Resolve(opts []CallOption) CallOptions {
	var o CallOptions
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	if o.Consistency == "" {
		o.Consistency = Linearizable
	}
	return o
}
