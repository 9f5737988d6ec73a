package mutex

// Refusal is why a front end turned a client away before the table saw
// its request, or why the table refused an acquire by its account's caps.
// Metrics count each as locking_center_refusals_total{reason}.
type Refusal uint8

const (
	// RefusedUnauthenticated: no token, or one that names no principal.
	RefusedUnauthenticated Refusal = iota
	// RefusedForbidden: a principal asked for a key or an operation its
	// role or prefixes do not allow.
	RefusedForbidden
	// RefusedV1: a v1 request from outside the networks allowed to use v1
	// while authentication is on.
	RefusedV1
	// RefusedConnections: the server had as many connections as allowed.
	RefusedConnections
	// RefusedRate: a source sent requests faster than its rate allows.
	RefusedRate
	// RefusedHeld: an acquire over its account's cap on locks (the table's
	// StatusOverLimit, counted by the table).
	RefusedHeld
	// RefusedParked: an acquire over its account's cap on parked requests
	// (the table's StatusOverLimit, counted by the table).
	RefusedParked

	numRefusals
)

var refusalNames = [numRefusals]string{
	RefusedUnauthenticated: "unauthenticated",
	RefusedForbidden:       "forbidden",
	RefusedV1:              "v1",
	RefusedConnections:     "connections",
	RefusedRate:            "rate",
	RefusedHeld:            "held",
	RefusedParked:          "parked",
}

// String returns the reason's label value.
func (r Refusal) String() string {
	if r < numRefusals {
		return refusalNames[r]
	}
	return "unknown"
}

// Refusals lists every reason, in order.
func Refusals() []Refusal {
	out := make([]Refusal, numRefusals)
	for i := range out {
		out[i] = Refusal(i)
	}
	return out
}

// Refused counts one refusal of reason r by a front end. It is safe to call
// at any time, also with the node's lock held by someone else; it never
// blocks.
func (n *Node) Refused(r Refusal) {
	if r < numRefusals {
		n.refusals[r].Add(1)
	}
}

// Limits are the caps the node stamps on every acquire a front end hands
// it (Command.MaxHeld and MaxParked): what one account may hold and have
// parked. Zero: no cap.
type Limits struct {
	MaxHeld, MaxParked uint32
}

// stamp sets what the node decides of c at now: its time, and the caps of
// an acquire.
func (n *Node) stamp(c *Command) {
	switch {
	case c.Op == OpAcquire:
		c.MaxHeld, c.MaxParked = n.limits.MaxHeld, n.limits.MaxParked
	case c.Op == OpRelease && c.Session == 0, c.Op == OpResetKey, c.Op == OpResetSource:
		// Only the grants this node knows of now: whatever commits later
		// was granted before the request or is not its to end (Before).
		c.Before = n.t.LastToken() + 1
	}
}
