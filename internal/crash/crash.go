// Package crash lets rowleasetest simulate a crashed process, with no
// crash simulation on request's public API and no global: every
// *request.Run embeds a Point (under an unexported name), which package
// request arms with the run's abandonment when the run starts, and
// rowleasetest.Crash fires it through the run it is given (Fire).
//
// Point has no exported field or method, so embedding it adds nothing to
// Run's API; and only the packages of this module can name it, so only
// they can fire it.
package crash

// Point is where a run can be made to crash. The zero Point is not armed:
// firing it does nothing.
type Point struct {
	abandon func()
}

// Arm makes Fire call abandon. Package request arms a run's Point before
// the run's agent is called, with what stops the run's heartbeat and makes
// its Handle return without writing or releasing anything.
func Arm(p *Point, abandon func()) { p.abandon = abandon }

// point returns the Point. Its name is unexported, so a value of another
// package has the method only by embedding a Point: that is how Fire finds
// the Point of a run.
func (p *Point) point() *Point { return p }

// Fire calls the abandonment armed in the Point that v embeds, and
// reports whether there was one: v embeds no Point, or its Point is not
// armed yet, and nothing happens.
func Fire(v any) bool {
	c, ok := v.(interface{ point() *Point })
	if !ok {
		return false
	}
	p := c.point()
	if p.abandon == nil {
		return false
	}
	p.abandon()
	return true
}
