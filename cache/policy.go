package cache

import (
	"fmt"
	"time"
)

// Class says how settled an answer is; its TTL follows (docs/design.md).
type Class uint8

const (
	Head     Class = iota // moves with the chain head: seconds
	Final                 // settled chain data: hours
	Volatile              // holder positions: tens of seconds
	Negative              // not found (yet): seconds
	numClasses
)

var classNames = [numClasses]string{"head", "final", "volatile", "negative"}

func (c Class) String() string {
	if c < numClasses {
		return classNames[c]
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

// settledness orders the classes from the least settled.
var settledness = [numClasses]int{Head: 0, Negative: 1, Volatile: 2, Final: 3}

// LeastSettled is the class of an answer made of parts of classes a and b:
// the class of the part that may change soonest.
func LeastSettled(a, b Class) Class {
	if a < numClasses && b < numClasses && settledness[b] < settledness[a] {
		return b
	}
	return a
}

// TTLs holds the fresh time of each class for one route. A zero field means
// the class does not occur on that route.
type TTLs struct {
	Head     time.Duration
	Final    time.Duration
	Volatile time.Duration
	Negative time.Duration
}

// For returns the fresh time of class c, falling back to the shortest
// configured one when the route does not name c: an answer of an unexpected
// class is never kept longer than the route's most careful TTL.
func (t TTLs) For(c Class) time.Duration {
	var d time.Duration
	switch c {
	case Head:
		d = t.Head
	case Final:
		d = t.Final
	case Volatile:
		d = t.Volatile
	case Negative:
		d = t.Negative
	}
	if d > 0 {
		return d
	}
	return t.Shortest()
}

// Shortest is the smallest positive TTL of the route.
func (t TTLs) Shortest() time.Duration {
	var m time.Duration
	for _, d := range []time.Duration{t.Head, t.Final, t.Volatile, t.Negative} {
		if d > 0 && (m == 0 || d < m) {
			m = d
		}
	}
	return m
}
