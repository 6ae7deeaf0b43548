package node

import (
	"testing"
)

// TestFoundingOfferWhole: what a founder tells its peers (foundingOffer,
// in every probe reply) never says "ready" without its candidate, however
// the read and the offer (offerCandidate) interleave. Told "ready" with no
// candidate, a peer leaves this founder's candidate out of the least it
// takes, and the founders bootstrap under two cluster IDs.
func TestFoundingOfferWhole(t *testing.T) {
	torn := 0
	for range 20000 {
		n := &Node{}
		done := make(chan struct{})
		go func() {
			n.offerCandidate("5e1f0000-0000-4000-8000-000000000000")
			close(done)
		}()
		for {
			ready, candidate := n.foundingOffer()
			if ready {
				if candidate == "" {
					torn++
				}
				break
			}
		}
		<-done
	}
	if torn > 0 {
		t.Fatalf("%d of 20000 offers read as ready without their candidate", torn)
	}
}
