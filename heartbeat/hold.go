package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/lease"
)

// HoldOptions configure Hold.
type HoldOptions struct {
	// TTL of the lease; required (lease.MinTTL to lease.MaxTTL).
	TTL time.Duration
	// Interval between renewals; zero means TTL/3 (the most allowed).
	Interval time.Duration
	// Wait, when set, waits for a held lease (lease.Lease.AcquireWait with
	// these bounds) instead of failing at once with lease.ErrHeld.
	Wait *lease.WaitOptions
	// Acquire refines the acquire (states, columns set with it).
	Acquire lease.AcquireOptions
	// ReleaseTimeout bounds the release at the end, which runs even when
	// ctx is already done; zero means 5s.
	ReleaseTimeout time.Duration
	// Logger receives the supervisor's and the release's messages; nil
	// means slog.Default(), as everywhere in rowlease.
	Logger *slog.Logger
	// OnEvent is passed to the supervisor (see Config.OnEvent).
	OnEvent func(Event)
}

// Hold takes the lease on key for holder, keeps it alive while fn runs,
// and releases it: one call for the whole life of a plain lease. fn gets a
// context that is cancelled, with a *LostError cause, as soon as the lease
// is lost (and when ctx ends), and the grant (its Generation is the fencing
// token to hand on).
//
// It returns fn's error; or, when the lease was lost while fn ran, a
// *LostError (matching lease.ErrLost) joined with fn's error, even if fn
// returned nil — its work ran without the lease for a while. An acquire
// that fails returns its error and never calls fn: lease.ErrHeld at once,
// unless o.Wait is set. The release is token-checked and runs with a
// bounded context that survives ctx; a failed release is logged and
// joined to the result (the lease then expires after its TTL). If fn
// panics, the lease is released and the panic goes on.
func Hold[K lease.Key](ctx context.Context, l *lease.Lease[K], db lease.DB, key K, holder string, o HoldOptions, fn func(ctx context.Context, g lease.Grant[K]) error) (err error) {
	if l == nil {
		return &engine.ValidationError{Package: "heartbeat", Field: "lease", Reason: "nil"}
	}
	if fn == nil {
		return &engine.ValidationError{Package: "heartbeat", Field: "fn", Reason: "nil"}
	}
	if o.Interval == 0 {
		o.Interval = o.TTL / 3
	}
	if o.ReleaseTimeout <= 0 {
		o.ReleaseTimeout = 5 * time.Second
	}
	sup, err := New(Config{Interval: o.Interval, TTL: o.TTL, Logger: o.Logger, OnEvent: o.OnEvent})
	if err != nil {
		return err
	}
	var g lease.Grant[K]
	if o.Wait != nil {
		g, err = l.AcquireWait(ctx, db, key, holder, o.TTL, o.Acquire, *o.Wait)
	} else {
		g, err = l.AcquireWith(ctx, db, key, holder, o.TTL, o.Acquire)
	}
	if err != nil {
		return err
	}
	r := ForLease("lease", l, db, g)
	sup.Add(r)
	work, err := sup.Start(ctx)
	if err != nil {
		return errors.Join(err, release(ctx, l, db, g, o))
	}
	defer func() {
		// fn panicked: give the lease back, then let the panic go on.
		if p := recover(); p != nil {
			sup.Stop()
			_ = release(ctx, l, db, r.Grant(), o)
			panic(p)
		}
	}()
	ferr := fn(work, g)
	sup.Stop()
	lost := sup.Lost()
	rerr := release(ctx, l, db, r.Grant(), o)
	if lost != nil {
		return errors.Join(lost, ferr)
	}
	return errors.Join(ferr, rerr)
}

func release[K lease.Key](ctx context.Context, l *lease.Lease[K], db lease.DB, g lease.Grant[K], o HoldOptions) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.ReleaseTimeout)
	defer cancel()
	err := engine.TimeoutError{
		Wait:  "heartbeat: Hold's release of the lease",
		Limit: o.ReleaseTimeout, Setting: "heartbeat.HoldOptions.ReleaseTimeout",
		Advice: "fn's work is done; the lease stays held until its TTL runs out, and then anyone may take it",
	}.Of(cctx, l.Release(cctx, db, g))
	if err == nil || errors.Is(err, lease.ErrLost) {
		return nil // gone already: nothing of ours to give back
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	log.Warn("heartbeat: release failed; the lease will expire after its TTL", "err", err)
	return fmt.Errorf("heartbeat: release: %w", err)
}
