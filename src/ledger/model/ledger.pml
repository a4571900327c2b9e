/*
 * ledger.pml -- an exhaustive model of the sluice shared-memory ledger protocol (spin 6).
 *
 * It follows, step by step, the code beside it; each step names the function it stands for:
 *   core.ts    LedgerCore.lock / unlock / tryLockForRepair   (the one lock, H_LOCK)
 *   gate.ts    Gate.enqueue / watch / onWake / cancel / release, claimLocked, passOnLocked,
 *              oldestWaitingLocked, reclaimGateLocked     (one FIFO permit gate)
 *   budget.ts  ByteBudget.tryReserve / release, reclaimBytesLocked   (with -DBUDGET)
 *   ledger.ts  Ledger.reclaimRow / tryReclaimRow          (reclaim of a dead thread's row)
 *   primary/supervisor.ts  the exit handler and its dead set (which locks may be stolen)
 * Change both together. README.md (here) says what is abstracted and why, how to run it, and
 * what it found; scripts/verify-model.ts (`npm run verify:model`) runs every configuration.
 *
 * Processes: the primary (init; row 0, token 1; its event loop runs reclaimRow for each dead
 * worker's `exit` event, retrying while a live thread holds the lock), Worker(r) for rows
 * 1..NW (token r + 1), the Killer (stops a worker at any step -- blocked, sleeping, or between
 * two writes of a critical section -- at most MAX_DEATHS times), and the Monitor (checks the
 * invariants in every reachable state).
 *
 * Granularity. Every write to a shared cell inside a critical section is its own step, so a
 * death between any two writes is explored. Reads inside the lock are folded into the next
 * write (nothing else writes those cells while the lock is held, and a death between a read
 * and a write is a death before the write). Steps that other threads observe outside the lock
 * (the waitAsync registration, onWake's load, every notify) are steps of their own.
 *
 * Properties (each assertion names its property; scripts/verify-model.ts reports the name):
 *   P1_never_over_admitted    outside the lock G_ACTIVE = sum(rows) + #GRANTED <= MAX (G1); at
 *                             all times the permits live threads believe they hold <= MAX,
 *                             and no thread believes it holds more than its row records.
 *   P2_permit_exactly_once    no permit lost or duplicated, whoever wins a grant/cancel/timeout
 *                             race: release never finds its row empty, G_QUEUED = #WAITING
 *                             (G2), and at the end (all finished, or died and were reclaimed)
 *                             the lock is free and every counter, row and slot is zero.
 *   P3_no_lost_wakeup         outside the lock G_QUEUED > 0 implies G_ACTIVE = MAX (G3); and no
 *                             thread is blocked forever: spin's "invalid end state" check, with
 *                             patient waiters (no deadline), so a lost notify leaves one asleep.
 *                             The model has no cycles (checked), so every execution ends and
 *                             this is the liveness property "every waiter settles".
 *   P4_fifo                   a permit is handed only to the WAITING slot with the oldest
 *                             ticket; granted tickets strictly increase; the fast path never
 *                             runs while a slot is WAITING.
 *   P5_reclaim_exactly_once   reclaimRow returns what the dead row truly held (at death, plus
 *                             grants handed to it after death); a second reclaimRow of the row
 *                             gives nothing back and, unless it had to steal the lock from
 *                             another dead row (whose half-done section it then repairs),
 *                             changes nothing.
 *   B1_budget                 (-DBUDGET) outside the lock B_RESERVED = sum(rows) <= LIMIT; the
 *                             bytes live threads believe they hold <= LIMIT; all zero at the end.
 *   L1_lock_discipline        unlock only by the holder (core.ts L1).
 *   S1_slot_ownership         a live waiter's slot is never freed by anyone else.
 *
 * Configuration (-D...): NW workers (1..4), MAXP permits and QMAX queue (MAXP + QMAX in 2..4),
 * OPS acquires (or reservations) per worker and OPS1 for worker 1, MAX_DEATHS, PATIENT (a
 * waiter may have no deadline; with deaths it needs the D1 fix, see README "D1"), SPURIOUS
 * (stray wake-ups per wait), DOUBLE_RECLAIM, PRIMARY_OPS (the primary calls the gate itself),
 * BUDGET (the byte-budget model instead of the gate), LIMIT. MUT_* select a deliberate bug (a
 * mutant, which the verifier must catch); MUT_D1_NO_GRANTED_NOTIFY restores the defect D1
 * (fixed in gate.ts reclaimGateLocked) as a mutant.
 */

/* ------------------------------------------------------------------ configuration */
/* The defaults are the configuration `gate-2x2-death` of scripts/verify-model.ts. */
#ifndef NW
#define NW 3
#endif
#ifndef MAXP
#define MAXP 2
#endif
#ifndef QMAX
#define QMAX 2
#endif
#ifndef OPS
#define OPS 1
#ifndef OPS1
#define OPS1 2             /* worker 1 holds a permit while it acquires another */
#endif
#endif
#ifndef OPS1
#define OPS1 OPS           /* -DOPS=n alone: every worker n */
#endif
#define OPS_OF(w) (w == 1 -> OPS1 : OPS)
#ifndef MAX_DEATHS
#define MAX_DEATHS 1
#endif
#ifndef PATIENT
#define PATIENT 0          /* 1: a waiter may have no deadline and no signal */
#endif
#ifndef SPURIOUS
#define SPURIOUS 0         /* stray wake-ups per wait, besides notifies on reused slots */
#endif
#ifndef DOUBLE_RECLAIM
#define DOUBLE_RECLAIM 1   /* the primary may call reclaimRow twice for the same row */
#endif
#ifndef PRIMARY_OPS
#define PRIMARY_OPS 0      /* tryAcquire() + release() calls made by the primary itself */
#endif
#ifndef LIMIT
#define LIMIT 3            /* budget: B_LIMIT */
#endif

#define NR (NW + 1)        /* rows: 0 = the primary, 1..NW = workers */
#define NS (MAXP + QMAX)   /* G_SLOTS = maxPermits + maxQueued (gate.ts initGate) */
#define PRIMARY 0
#define PTOKEN 1           /* the primary's lock token: row + 1 */

/* layout.ts slot states */
#define FREE 0
#define WAITING 1
#define GRANTED 2
#define NONE 255

/* a waiter's caller: no deadline (patient), a deadline timer, or an AbortSignal */
#define M_PATIENT 1
#define M_TIMEOUT 2
#define M_ABORT 3
#define M_EARLY 4          /* an abort (or a throw) inside onQueued(), before watch(w) */

/* property names: constant, hidden (not in the state vector), shown in assertion messages */
hidden byte P1_never_over_admitted = 1;
hidden byte P2_permit_exactly_once = 1;
hidden byte P3_no_lost_wakeup = 1;
hidden byte P4_fifo = 1;
hidden byte P5_reclaim_exactly_once = 1;
hidden byte B1_budget = 1;
hidden byte L1_lock_discipline = 1;
hidden byte S1_slot_ownership = 1;

/* ------------------------------------------------------------------ shared ledger cells */
byte lock;                 /* core.ts H_LOCK: 0 or the holder's token */
#ifndef BUDGET
byte ACTIVE;               /* G_ACTIVE */
byte QUEUED;               /* G_QUEUED */
byte NEXT_TICKET;          /* G_NEXT_TICKET (small here: no wrap, see README) */
byte sstate[NS];           /* S_STATE: FREE / WAITING / GRANTED (the waitAsync address) */
byte sowner[NS];           /* S_OWNER: row */
byte sticket[NS];          /* S_TICKET */
byte held[NR];             /* R_HELD + gate: permits claimed by each row */
byte sleeping[NR];         /* per thread: 1 + the slot its pending Atomics.waitAsync is
                              registered on, 0 = none (the JS engine's waiter list) */
#else
byte RESERVED;             /* B_RESERVED */
byte bytes[NR];            /* R64_BYTES per row */
#endif

/* ------------------------------------------------------------------ thread lifecycle */
bool dying[NR];            /* Killer decided: the thread stops at its next step */
bool dead[NR];             /* the thread stopped; its `exit` event is pending in the primary */
bool deadSet[NR];          /* supervisor.ts `dead`: exit observed, reclaim not finished yet */
bool done[NR];             /* the thread finished its work normally (holding nothing) */
byte reclaims[NR];         /* reclaimRow calls made for the row */
byte deaths;

/* ------------------------------------------------------------------ ghosts (not ledger cells) */
byte believe[NR];          /* permits (bytes) a live thread believes it holds: from the moment
                              acquire resolves until it calls release */
byte truthAtDeath[NR];     /* P5: what the row truly held when it died, plus grants after */
#ifndef BUDGET
byte lastGrant;            /* P4: 1 + ticket of the last WAITING -> GRANTED */
byte snapACTIVE, snapQUEUED;   /* P5: state before a second reclaimRow */
byte snapState[NS];
byte snapHeld[NR];
#else
byte snapRESERVED;
byte snapBytes[NR];
#endif

/* ------------------------------------------------------------------ sums over rows / slots */
#if NR == 2
#define SUM_R(a) (a[0] + a[1])
#define ALL_R(P) (P(0) && P(1))
#define ALL_W(P) (P(1))
#elif NR == 3
#define SUM_R(a) (a[0] + a[1] + a[2])
#define ALL_R(P) (P(0) && P(1) && P(2))
#define ALL_W(P) (P(1) && P(2))
#elif NR == 4
#define SUM_R(a) (a[0] + a[1] + a[2] + a[3])
#define ALL_R(P) (P(0) && P(1) && P(2) && P(3))
#define ALL_W(P) (P(1) && P(2) && P(3))
#elif NR == 5
#define SUM_R(a) (a[0] + a[1] + a[2] + a[3] + a[4])
#define ALL_R(P) (P(0) && P(1) && P(2) && P(3) && P(4))
#define ALL_W(P) (P(1) && P(2) && P(3) && P(4))
#else
#error "NW must be 1..4"
#endif

#ifndef BUDGET
#define SC(i, v) (sstate[i] == v -> 1 : 0)
#define SO(i, v, w) ((sstate[i] == v && sowner[i] == w) -> 1 : 0)
#define OLD(i, t) (sstate[i] == WAITING && sticket[i] < t)
#if NS == 2
#define COUNT(v) (SC(0, v) + SC(1, v))
#define OWNED(v, w) (SO(0, v, w) + SO(1, v, w))
#define OLDER_WAITING(t) (OLD(0, t) || OLD(1, t))
#elif NS == 3
#define COUNT(v) (SC(0, v) + SC(1, v) + SC(2, v))
#define OWNED(v, w) (SO(0, v, w) + SO(1, v, w) + SO(2, v, w))
#define OLDER_WAITING(t) (OLD(0, t) || OLD(1, t) || OLD(2, t))
#elif NS == 4
#define COUNT(v) (SC(0, v) + SC(1, v) + SC(2, v) + SC(3, v))
#define OWNED(v, w) (SO(0, v, w) + SO(1, v, w) + SO(2, v, w) + SO(3, v, w))
#define OLDER_WAITING(t) (OLD(0, t) || OLD(1, t) || OLD(2, t) || OLD(3, t))
#else
#error "MAXP + QMAX must be 2..4"
#endif

/* the gate invariants, gate.ts header */
#define G1 (ACTIVE == SUM_R(held) + COUNT(GRANTED) && ACTIVE <= MAXP)
#define G2 (QUEUED == COUNT(WAITING) && QUEUED <= QMAX)
#define G3 (QUEUED == 0 || ACTIVE == MAXP)
#define G4 (COUNT(WAITING) + COUNT(GRANTED) <= NS)
#define BEL_LE_HELD(w) (believe[w] <= held[w])
#define GATE_OK (ALL_R(BEL_LE_HELD) && SUM_R(believe) <= MAXP && (lock != 0 || (G1 && G2 && G3 && G4)))
#define IDLE_ROW(w) (held[w] == 0 && believe[w] == 0 && sleeping[w] == 0)
#else
#define BEL_LE_BYTES(w) (believe[w] <= bytes[w])
#define BUDGET_OK (ALL_R(BEL_LE_BYTES) && SUM_R(believe) <= LIMIT && (lock != 0 || (RESERVED == SUM_R(bytes) && RESERVED <= LIMIT)))
#define IDLE_ROW(w) (bytes[w] == 0 && believe[w] == 0)
#endif


/* ------------------------------------------------------------------ core.ts: the lock */
/* LedgerCore.lock(): compareExchange(H_LOCK, 0, token); lockSlow() spins, then parks in
   bounded Atomics.wait slices (PARK_MS) and retries the same compareExchange. Parking only
   bounds CPU use and wake-up latency, so it is modelled as blocking until H_LOCK is 0 and
   taking it in one atomic step (README: what is abstracted). */
#define LOCK(tok) atomic { lock == 0 -> lock = tok }
/* LedgerCore.unlock(): compareExchange(H_LOCK, token, 0) must return the token, else it
   throws ("released by a thread that does not hold it"); then notify(H_LOCK, 1) if parked. */
#define DO_UNLOCK(tok) assert(L1_lock_discipline && lock == tok); lock = 0
#define UNLOCK(tok) atomic { DO_UNLOCK(tok) }

#ifndef BUDGET
/* Atomics.notify(i32, stateIndex(s)) (count = all): every waitAsync registered on the slot's
   state word resolves. Used inside d_step: one atomic step. */
#define WAKE1(t, s) if :: sleeping[t] == s + 1 -> sleeping[t] = 0 :: else -> skip fi
#if NR == 2
#define NOTIFY(s) WAKE1(0, s); WAKE1(1, s)
#elif NR == 3
#define NOTIFY(s) WAKE1(0, s); WAKE1(1, s); WAKE1(2, s)
#elif NR == 4
#define NOTIFY(s) WAKE1(0, s); WAKE1(1, s); WAKE1(2, s); WAKE1(3, s)
#else
#define NOTIFY(s) WAKE1(0, s); WAKE1(1, s); WAKE1(2, s); WAKE1(3, s); WAKE1(4, s)
#endif

/* gate.ts oldestWaitingLocked(): -1 (NONE) when G_QUEUED is 0, else the WAITING slot with the
   oldest ticket. Reads only (inside the lock). */
inline oldestWaiting(best, k) {
  best = NONE;
  if
  :: QUEUED == 0 -> skip
  :: else ->
     k = 0;
     do
     :: k < NS ->
        if
#ifdef MUT_HANDOFF_BY_INDEX
        /* MUTANT: the first WAITING slot by index, not the oldest ticket */
        :: sstate[k] == WAITING && best == NONE -> best = k
#else
        :: sstate[k] == WAITING && (best == NONE || sticket[k] < sticket[best]) -> best = k
#endif
        :: else -> skip
        fi;
        k++
     :: else -> break
     od;
     k = 0
  fi
}

/* The WAITING -> GRANTED store, Atomics.store(S_STATE, GRANTED), with the property ghosts. */
inline grantStore(s) {
  assert(P4_fifo && sstate[s] == WAITING && !OLDER_WAITING(sticket[s]));
  assert(P4_fifo && sticket[s] + 1 > lastGrant);
  lastGrant = sticket[s] + 1;
  if :: dead[sowner[s]] -> truthAtDeath[sowner[s]]++ :: else -> skip fi;
  sstate[s] = GRANTED
}

/* gate.ts passOnLocked(): a permit just came free; hand it to the oldest WAITING slot
   (returned in `handed`, notified after unlock) or return it to the pool (handed = NONE). */
inline passOnLocked(tok, handed, k) {
  atomic {
    assert(L1_lock_discipline && lock == tok);
    oldestWaiting(handed, k);
#ifdef MUT_NO_HANDOFF
    handed = NONE;                       /* MUTANT: a release never hands off */
#endif
    if
    :: handed == NONE -> ACTIVE--        /* passOnLocked: i32[G_ACTIVE]-- */
    :: else -> grantStore(handed)        /* passOnLocked: Atomics.store(slot state, GRANTED) */
    fi
  };
  if
  :: handed != NONE -> QUEUED--          /* passOnLocked: i32[G_QUEUED]--  (bump(GT_ADMITTED): totals not modelled) */
  :: else -> skip
  fi
}

/* ================================================================== a worker, on the gate */
/* enqueue(): not the fast path (the negation of its test) */
#if defined(MUT_BARGE)
#define SLOW (ACTIVE >= MAXP)
#elif defined(MUT_OVERADMIT)
#define SLOW (QUEUED != 0 || ACTIVE > MAXP)
#else
#define SLOW (QUEUED != 0 || ACTIVE >= MAXP)
#endif
proctype Worker(byte me) {         /* row me, token me + 1 */
  byte op;                         /* acquires started */
  byte slot;                       /* Waiter.slot: enqueue()'s return value */
  byte ticket;                     /* enqueue(): the ticket taken */
  byte mode;                       /* the caller: M_PATIENT / M_TIMEOUT / M_ABORT */
  bool granted;                    /* cancel(): outcome === 'granted' */
  byte handed = NONE;              /* release() / cancel(): the slot handed a permit */
  byte k;
  byte spur;
  {
  do
  /* ---------------------------------------------------------------- Gate.acquire() */
  /* acquire(): signal not aborted; enqueue(): core.lock(). Starting an acquire and winning the
     lock are one step: until it wins the lock a thread has written nothing, so a thread that
     committed to acquire and waits for the lock is indistinguishable from one that has not
     started yet (and a dead holder blocks both alike). */
  :: atomic { op < OPS_OF(me) && lock == 0 -> op++; lock = me + 1 }
     if
     /* enqueue(): queued === 0 && active < G_MAX: i32[G_ACTIVE] = active + 1 */
#if defined(MUT_BARGE)
     :: atomic { ACTIVE < MAXP ->                    /* MUTANT: the fast path ignores the queue */
#elif defined(MUT_OVERADMIT)
     :: atomic { QUEUED == 0 && ACTIVE <= MAXP ->    /* MUTANT: off by one */
#else
     :: atomic { QUEUED == 0 && ACTIVE < MAXP ->
#endif
          assert(P4_fifo && COUNT(WAITING) == 0);   /* the fast path never barges */
          ACTIVE++ }
        held[me]++;                                  /* enqueue(): i32[this.held]++  @cover fast-path */
        atomic { DO_UNLOCK(me + 1); believe[me]++ }  /* enqueue(): core.unlock(); ENQUEUE_GRANTED: acquire resolves */
     /* enqueue(): queued >= G_QUEUE_MAX: ENQUEUE_FULL, the acquire rejects (nothing written
        but bump(GT_REFUSED_FULL), a total, not modelled) */
     :: atomic { SLOW && QUEUED >= QMAX -> DO_UNLOCK(me + 1) }   /* @cover queue-full-refusal */
     /* enqueue(): a waiter slot. The scan for a FREE slot (G4 says one exists, else it throws),
        then i32[G_NEXT_TICKET] = ticket + 1 */
     :: atomic { SLOW && QUEUED < QMAX ->
          slot = NONE; k = 0;
          do
          :: k < NS && sstate[k] == FREE -> slot = k; break
          :: k < NS && sstate[k] != FREE -> k++
          :: k >= NS -> break
          od;
          k = 0;
          assert(P2_permit_exactly_once && slot != NONE);   /* "no free waiter slot (G4)" unreachable */
          ticket = NEXT_TICKET;
          NEXT_TICKET++ }
        sowner[slot] = me;                           /* enqueue(): i32[at + S_OWNER] = core.row */
        sticket[slot] = ticket;                      /* enqueue(): i32[at + S_TICKET] = ticket */
        atomic { sstate[slot] = WAITING; ticket = 0 }   /* enqueue(): Atomics.store(S_STATE, WAITING), the commit point */
        QUEUED++;                                    /* enqueue(): i32[G_QUEUED] = queued + 1  @cover enqueued */
        /* enqueue(): core.unlock(); return slot. The caller's deadline and signal (chosen by
           the environment; a patient caller holds nothing, so it cannot deadlock the model) */
        atomic {
          DO_UNLOCK(me + 1);
          if
          :: PATIENT && believe[me] == 0 -> mode = M_PATIENT   /* @cover patient-waiter */
          :: mode = M_TIMEOUT
          :: mode = M_ABORT
          :: mode = M_EARLY
          fi }
        /* acquire(): new Promise(...): arm(w, deadline), the signal's listener, onQueued(),
           then watch(w) */
        /* ---- Gate.watch(w): Atomics.waitAsync(i32, stateIndex(slot), WAITING) ---- */
watch:  if                                           /* watch(): Atomics.waitAsync(i32, idx, WAITING) */
        /* acquire(): onQueued() aborted the signal, or threw: cancel(w, 'abort', err) before
           watch(w) (which then returns at once: settled) */
        :: mode == M_EARLY -> mode = M_ABORT; goto cancel   /* @cover abort-in-onqueued */
#ifdef MUT_NAIVE_WAIT
        /* MUTANT: "check the slot is WAITING, then sleep" as two steps: a notify in between
           is lost */
        :: mode != M_EARLY && sstate[slot] == WAITING -> sleeping[me] = slot + 1
#else
        /* waitAsync compares and registers in one atomic step: the value is WAITING and the
           waiter is on the slot's list ({ async: true }) ... */
        :: atomic { mode != M_EARLY && sstate[slot] == WAITING -> sleeping[me] = slot + 1 }   /* @cover waitasync-sleeps */
#endif
        /* ... or the value differs: { async: false }, and watch() calls onWake(w) at once */
        :: mode != M_EARLY && sstate[slot] != WAITING -> goto onwake
        fi;
        do                                           /* the thread's event loop, this acquire pending */
        :: sleeping[me] == 0 -> goto onwake          /* r.value resolves (a notify): onWake(w) */
        :: mode == M_TIMEOUT -> goto cancel          /* the deadline timer: cancel(w, 'timeout') */
        :: mode == M_ABORT -> goto cancel            /* the signal's 'abort' event: cancel(w, 'abort') */
#if SPURIOUS > 0
        :: spur < SPURIOUS && sleeping[me] != 0 -> sleeping[me] = 0; spur++   /* a stray wake-up  @cover spurious-wake */
#endif
        od;
onwake: /* ---- Gate.onWake(w) (runs synchronously: load, lock, claim, unlock) ---- */
        if
        /* Atomics.load(state) === GRANTED; core.lock(). Nothing but this thread (or the reclaim
           of this thread, dead) moves a GRANTED slot, so load and lock can be one step. */
        :: atomic { sstate[slot] == GRANTED && lock == 0 -> lock = me + 1 }
           sstate[slot] = FREE;                      /* claimLocked(): Atomics.store(state, FREE)  @cover woken-and-claimed */
           held[me]++;                               /* claimLocked(): i32[this.held]++ */
           atomic { DO_UNLOCK(me + 1);               /* onWake(): core.unlock(); settle(w); w.resolve() */
                    believe[me]++; slot = 0; mode = 0; spur = 0 }
        :: sstate[slot] != GRANTED -> goto watch     /* onWake(): not GRANTED (spurious): this.watch(w) */
        fi;
        goto settled;
cancel: /* ---- Gate.cancel(w, why): why is the waiter's mode (the event that fired) ---- */
        LOCK(me + 1);                                /* cancel(): core.lock() */
        if
        /* state === WAITING: Atomics.store(idx, FREE) */
        :: atomic { sstate[slot] == WAITING -> sstate[slot] = FREE }
           QUEUED--                                  /* cancel(): i32[G_QUEUED]--, outcome 'removed'  @cover cancel-while-waiting */
        /* state === GRANTED && why === 'timeout': claimLocked() keeps the grant */
        :: atomic { sstate[slot] == GRANTED && mode == M_TIMEOUT -> sstate[slot] = FREE }
#ifdef MUT_TIMEOUT_DROPS_GRANT
           QUEUED--                                  /* MUTANT: treated like a WAITING slot */
#else
           held[me]++;                               /* claimLocked(): i32[this.held]++  @cover timeout-after-grant */
           granted = 1                               /* outcome 'granted' */
#endif
        /* state === GRANTED (abort): the grant won the race; claim, then release and pass on */
        :: atomic { sstate[slot] == GRANTED && mode == M_ABORT -> sstate[slot] = FREE }
#if defined(MUT_CANCEL_GRANTED_LEAK)
           skip                                      /* MUTANT: the slot is freed, the permit is not put back */
#elif defined(MUT_PUTBACK_TO_POOL)
           ACTIVE--                                  /* MUTANT: the permit goes to the pool, not to the next waiter */
#else
           held[me]++;                               /* claimLocked(): i32[this.held]++ */
           held[me]--;                               /* cancel(): i32[this.held]--  @cover abort-after-grant */
           passOnLocked(me + 1, handed, k)           /* cancel(): handedTo = passOnLocked(), outcome 'put-back' */
#endif
        /* state FREE: only a reclaim frees a live owner's slot; unreachable for a live thread */
        :: sstate[slot] == FREE -> assert(S1_slot_ownership && false)
        fi;
        UNLOCK(me + 1);                              /* cancel(): core.unlock() */
        if
        /* Atomics.notify(i32, idx); no handedTo; settle(w); resolve or reject */
        :: d_step { handed == NONE; NOTIFY(slot);
                    if :: granted -> believe[me]++ :: else -> skip fi;
                    granted = 0; slot = 0; mode = 0; spur = 0 }
        /* Atomics.notify(i32, idx); Atomics.notify(i32, stateIndex(handedTo)); settle(w); reject */
        :: d_step { handed != NONE; NOTIFY(slot) };
           d_step { NOTIFY(handed); handed = NONE;   /* @cover put-back-handed-on */
                    granted = 0; slot = 0; mode = 0; spur = 0 }
        fi
settled: skip
     fi
  /* ---------------------------------------------------------------- Gate.release() */
  /* the caller stops using its permit and calls release(): core.lock() */
  :: atomic { believe[me] > 0 && lock == 0 -> believe[me]--; lock = me + 1 }
     d_step { assert(P2_permit_exactly_once && held[me] > 0);   /* i32[this.held] <= 0 would throw */
              held[me]-- }                        /* release(): i32[this.held]-- (bump(GT_RELEASED) not modelled) */
     passOnLocked(me + 1, handed, k);             /* release(): granted = passOnLocked() */
     if
     :: atomic { handed == NONE -> DO_UNLOCK(me + 1) }   /* release(): core.unlock()  @cover release-to-pool */
     :: atomic { handed != NONE -> DO_UNLOCK(me + 1) };  /* release(): core.unlock(), then */
        d_step { NOTIFY(handed); handed = NONE }          /* Atomics.notify(granted slot)  @cover release-hands-off */
     fi
  /* ---------------------------------------------------------------- all work done */
  :: atomic { op == OPS_OF(me) && believe[me] == 0 -> done[me] = 1 }; break
  od
  } unless {
    /* DEATH (out of memory, terminate()): the thread stops wherever it is. Ghost bookkeeping:
       what the row truly holds (row + GRANTED slots), its beliefs and waitAsync vanish. */
    atomic { dying[me] ->
      truthAtDeath[me] = held[me] + OWNED(GRANTED, me);   /* @cover death */
      believe[me] = 0; sleeping[me] = 0; dead[me] = 1;
      op = 0; slot = 0; ticket = 0; mode = 0; granted = 0; handed = NONE; k = 0; spur = 0 }
  }
}

#else /* BUDGET */

/* ================================================================== a worker, on the byte budget */
proctype Worker(byte me) {         /* row me, token me + 1 */
  byte op;                         /* reservations attempted */
  byte n;                          /* the amount of this call */
  {
  do
  /* ---------------------------------------------------------------- ByteBudget.tryReserve(n) */
  /* n is 1 or 2 (<= B_LIMIT: the storage_request_too_large check happens before the lock and
     writes nothing but a total); core.lock() */
  :: atomic { op < OPS_OF(me) && lock == 0 -> op++; lock = me + 1; if :: n = 1 :: n = 2 fi }
     if
#ifdef MUT_BUDGET_NO_LIMIT
     :: atomic { RESERVED + n > LIMIT + 1 -> DO_UNLOCK(me + 1); n = 0 }      /* MUTANT: off by one */
     :: atomic { RESERVED + n <= LIMIT + 1 -> RESERVED = RESERVED + n }
#else
     /* reserved = B_RESERVED + n > limit: refused (B_REFUSED++, a total), core.unlock() */
     :: atomic { RESERVED + n > LIMIT -> DO_UNLOCK(me + 1); n = 0 }   /* @cover budget-refused */
     :: atomic { RESERVED + n <= LIMIT -> RESERVED = RESERVED + n }        /* Atomics.store(B_RESERVED, reserved) */
#endif
        bytes[me] = bytes[me] + n;                   /* Atomics.add(this.mine, big) (B_PEAK: statistics, not modelled)  @cover budget-reserved */
        atomic { DO_UNLOCK(me + 1); believe[me] = believe[me] + n; n = 0 }   /* core.unlock(); return true */
     fi
  /* ---------------------------------------------------------------- ByteBudget.release(n) */
  /* the caller returns 1 byte or all it holds; core.lock() */
  :: atomic { believe[me] > 0 && lock == 0 ->
       if :: n = 1 :: n = believe[me] fi;
       believe[me] = believe[me] - n; lock = me + 1 }
     d_step { assert(P2_permit_exactly_once && bytes[me] >= n);      /* mine < big would throw */
              bytes[me] = bytes[me] - n }                            /* release(): Atomics.sub(this.mine, big) */
     RESERVED = RESERVED - n;                                        /* release(): Atomics.sub(B_RESERVED, big)  @cover budget-released */
     atomic { DO_UNLOCK(me + 1); n = 0 }                             /* release(): core.unlock() */
  :: atomic { op == OPS_OF(me) && believe[me] == 0 -> done[me] = 1 }; break
  od
  } unless {
    atomic { dying[me] ->
      truthAtDeath[me] = bytes[me];   /* @cover budget-death */
      believe[me] = 0; dead[me] = 1; op = 0; n = 0 }
  }
}
#endif /* BUDGET */

/* ================================================================== the killer */
/* A worker may die at any step: the Killer marks it, and the worker's `unless` escape is
   taken before its next statement (blocked or not, inside a critical section or not). */
#if MAX_DEATHS > 0
#define KILL(w) :: atomic { deaths < MAX_DEATHS && !done[w] && !dying[w] -> dying[w] = 1; deaths++ }
active proctype Killer() {
end_killer:
  do
  KILL(1)
#if NW > 1
  KILL(2)
#endif
#if NW > 2
  KILL(3)
#endif
#if NW > 3
  KILL(4)
#endif
  od
}
#endif

/* ================================================================== the monitor */
/* Enabled only in a state that breaks an invariant; then the failing assertion names it. */
active proctype Monitor() {
end_monitor:
#ifndef BUDGET
  atomic { !GATE_OK ->
    assert(P1_never_over_admitted && ALL_R(BEL_LE_HELD) && SUM_R(believe) <= MAXP);
    assert(P1_never_over_admitted && (lock != 0 || G1));
    assert(P2_permit_exactly_once && (lock != 0 || (G2 && G4)));
    assert(P3_no_lost_wakeup && (lock != 0 || G3)) }
#else
  atomic { !BUDGET_OK ->
    assert(B1_budget && ALL_R(BEL_LE_BYTES) && SUM_R(believe) <= LIMIT);
    assert(B1_budget && (lock != 0 || (RESERVED == SUM_R(bytes) && RESERVED <= LIMIT))) }
#endif
}

/* ================================================================== the primary */
/* The primary's event loop (primary/supervisor.ts): a worker's `exit` event adds its row to
   the dead set and starts reclaimRow(row, isDeadRow = dead set); each tryReclaimRow attempt
   that finds the lock held by a thread not known dead returns null and is retried on a later
   turn (setImmediate), so other exit events are handled in between, in any order. With
   DOUBLE_RECLAIM a second reclaimRow of an already reclaimed row may come at any later time;
   with PRIMARY_OPS the primary also makes its own gate calls. */
#if DOUBLE_RECLAIM
#define AGAIN(W) :: atomic { reclaims[W] == 1 -> w = W }
#else
#define AGAIN(W)
#endif
/* the exit event (dead.add) with the first attempt, or a later retry */
#define PICK(W) :: atomic { dead[W] && reclaims[W] == 0 -> deadSet[W] = 1; w = W } AGAIN(W)
#define FINISHED(W) (done[W] || reclaims[W] > 0)

init {
  byte w, r, g, wt, x, y, k, stolen, nmask, pops;
  bool gaveUp;                                 /* tryLockForRepair returned null */
  byte s = NONE;
  byte handed = NONE;
  atomic {
    run Worker(1);
#if NW > 1
    run Worker(2);
#endif
#if NW > 2
    run Worker(3);
#endif
#if NW > 3
    run Worker(4);
#endif
  }
  do                                           /* the primary's event loop */
  :: if
     PICK(1)
#if NW > 1
     PICK(2)
#endif
#if NW > 2
     PICK(3)
#endif
#if NW > 3
     PICK(4)
#endif
     fi;
     /* ---------------------------------------------------- Ledger.reclaimRow(w) */
#ifndef BUDGET
     /* tryReclaimRow(w): core.tryLockForRepair(token => token === w + 1 || (token - 1 !==
        core.row && isDeadRow(token - 1))): take a free lock ('locked'), steal it from a dead
        row in the dead set ('stolen'), else return null and retry on a later turn. (Its
        SPINS re-reads are interleavings the model has anyway.) */
     atomic {                                     /* tryReclaimRow(): core.tryLockForRepair(...) */
       if
       :: lock == 0 -> lock = PTOKEN; stolen = 0
#ifdef MUT_REPAIR_PARKS
       :: lock == w + 1 -> lock = PTOKEN; stolen = 1
#else
       :: lock > PTOKEN && (lock == w + 1 || deadSet[lock - 1]) ->   /* 'stolen'  @cover lock-stolen-from-dead */
          lock = PTOKEN; stolen = 1
#endif
#if defined(MUT_STEAL_ANY)
       :: lock > PTOKEN && !(lock == w + 1 || deadSet[lock - 1]) ->
          lock = PTOKEN; stolen = 1                  /* MUTANT: steals from a live holder too */
#elif !defined(MUT_REPAIR_PARKS)
       :: lock > PTOKEN && !(lock == w + 1 || deadSet[lock - 1]) ->   /* null: retry later  @cover reclaim-retried */
          gaveUp = 1
#endif
       /* MUT_REPAIR_PARKS: the former lockForRepair, which parked until the lock was free or
          held by this very row (the primary's whole event loop with it) */
       fi;
       /* P5 ghost: the state before a second reclaimRow of the same row */
       if
       :: gaveUp -> skip
       :: !gaveUp && reclaims[w] > 0 ->               /* a second reclaimRow(w)  @cover reclaim-twice */
          snapACTIVE = ACTIVE; snapQUEUED = QUEUED;
          k = 0; do :: k < NS -> snapState[k] = sstate[k]; k++ :: else -> k = 0; break od;
          k = 0; do :: k < NR -> snapHeld[k] = held[k]; k++ :: else -> k = 0; break od
       :: !gaveUp && reclaims[w] == 0 -> skip
       fi }
     if :: gaveUp -> gaveUp = 0; goto reclaim_end :: else -> skip fi;
     /* ---- reclaimGateLocked(core, g, row) ---- */
#ifdef MUT_RECLAIM_NO_ZERO
     d_step { r = held[w] }                       /* MUTANT: reads the row without zeroing it */
#else
     d_step { r = held[w]; held[w] = 0 }          /* reclaimed = Atomics.exchange(R_HELD + g, 0) */
#endif
     atomic {                                     /* for each slot: the dead row's slots -> FREE */
       g = 0; wt = 0; k = 0;
       do
       :: k < NS ->
          if
          :: sstate[k] == FREE -> skip
          :: sstate[k] != FREE && sowner[k] == w ->
             if
             :: sstate[k] == GRANTED -> r++; x++       /* a grant to the dead row  @cover reclaim-dead-grant */
             :: else -> y++                            /* its WAITING slot  @cover reclaim-dead-waiter */
             fi;                                       /* (x, y: for a mutant) */
             sstate[k] = FREE                     /* Atomics.store(S_STATE, FREE) */
          :: sstate[k] == GRANTED && sowner[k] != w -> g++
          :: sstate[k] == WAITING && sowner[k] != w -> wt++
          fi;
          k++
       :: else -> k = 0; break
       od }
#ifdef MUT_RECLAIM_NO_RECOMPUTE
     /* MUTANT: adjust the derived counters by what was reclaimed instead of recomputing them */
     d_step { ACTIVE = ACTIVE - (r - x) - x; QUEUED = QUEUED - y; g = 0; wt = 0 }
#else
     /* Atomics.store(G_ACTIVE, sum(rows) + granted); Atomics.store(G_QUEUED, waiting) */
     d_step { ACTIVE = SUM_R(held) + g; QUEUED = wt; g = 0; wt = 0 }
#endif
     d_step { x = 0; y = 0 }
     /* (bump(GT_RECLAIMED): a total, not modelled) */
#ifndef MUT_RECLAIM_NO_HANDOFF
     /* while (G_ACTIVE < max): slot = oldestWaitingLocked(); store GRANTED; G_QUEUED -1;
        G_ACTIVE +1; out.push(slot) -- one step per permit handed out */
     do
     :: d_step { ACTIVE < MAXP -> oldestWaiting(s, k) };
        if
        :: s == NONE -> break
        :: else -> d_step { grantStore(s); QUEUED--; ACTIVE++; nmask = nmask | (1 << s); s = NONE }   /* @cover reclaim-hands-off */
        fi
     :: ACTIVE >= MAXP -> break
     od;
     s = NONE;
#endif
     /* reclaimBytesLocked, R_STATE = ROW_DEAD, B_ROW_RECLAIMS, B_REPAIRS: other cells / totals */
     /* P5: what came back is what the row held; a second reclaim changed nothing */
     atomic {
       if
       :: reclaims[w] == 0 && r == 0 -> assert(P5_reclaim_exactly_once && r == truthAtDeath[w])
       :: reclaims[w] == 0 && r > 0 -> assert(P5_reclaim_exactly_once && r == truthAtDeath[w])   /* @cover reclaim-returns-permits */
       /* a second call: the row gave nothing back; and unless it stole the lock from another
          dead row (then it legitimately repairs that row's half-done critical section),
          nothing changed at all */
       :: else ->
          assert(P5_reclaim_exactly_once && r == 0);
          assert(P5_reclaim_exactly_once && (stolen || (nmask == 0 && ACTIVE == snapACTIVE && QUEUED == snapQUEUED)));
          k = 0; do :: k < NS -> assert(P5_reclaim_exactly_once && (stolen || sstate[k] == snapState[k])); snapState[k] = 0; k++ :: else -> k = 0; break od;
          k = 0; do :: k < NR -> assert(P5_reclaim_exactly_once && (stolen || held[k] == snapHeld[k])); snapHeld[k] = 0; k++ :: else -> k = 0; break od;
          snapACTIVE = 0; snapQUEUED = 0
       fi;
       reclaims[w]++; r = 0; stolen = 0 }
#ifndef MUT_D1_NO_GRANTED_NOTIFY
     /* reclaimGateLocked(): also notify every GRANTED slot, whose waker may have died between
        its GRANTED store and its notify (a spurious wake-up is harmless). The mutant drops
        this: the defect D1 the model found before the code was fixed. */
     d_step { k = 0; do :: k < NS -> if :: sstate[k] == GRANTED -> nmask = nmask | (1 << k) :: else -> skip fi; k++ :: else -> k = 0; break od }
#endif
     UNLOCK(PTOKEN);                              /* tryReclaimRow(): finally core.unlock() */
     /* tryReclaimRow(): for (const idx of notify) Atomics.notify(core.i32, idx), one by one */
     k = 0;
     do
     :: k < NS && (nmask & (1 << k)) -> d_step { NOTIFY(k); nmask = nmask & ~(1 << k); k++ }
     :: k < NS && !(nmask & (1 << k)) -> k++
     :: k >= NS -> k = 0; break
     od;
     deadSet[w] = 0;                              /* supervisor: .then(() => dead.delete(row)) */
reclaim_end: skip
#else
     atomic {                                     /* tryReclaimRow(): core.tryLockForRepair(...), as above */
       if
       :: lock == 0 -> lock = PTOKEN; stolen = 0
#ifdef MUT_REPAIR_PARKS
       :: lock == w + 1 -> lock = PTOKEN; stolen = 1
#else
       :: lock > PTOKEN && (lock == w + 1 || deadSet[lock - 1]) -> lock = PTOKEN; stolen = 1
       :: lock > PTOKEN && !(lock == w + 1 || deadSet[lock - 1]) -> gaveUp = 1
#endif
       fi;
       if
       :: gaveUp -> skip
       :: !gaveUp && reclaims[w] > 0 ->
          snapRESERVED = RESERVED;
          k = 0; do :: k < NR -> snapBytes[k] = bytes[k]; k++ :: else -> k = 0; break od
       :: !gaveUp && reclaims[w] == 0 -> skip
       fi }
     if :: gaveUp -> gaveUp = 0; goto reclaim_end :: else -> skip fi;
     /* ---- reclaimBytesLocked(core, row, recompute = lockStolen) ---- */
     d_step { r = bytes[w]; bytes[w] = 0 }        /* bytes = Atomics.exchange(R64_BYTES, 0n) */
#ifdef MUT_BUDGET_NO_RECOMPUTE
     RESERVED = RESERVED - r;                     /* MUTANT: never recomputes, even when stolen */
#else
     if
     :: stolen -> RESERVED = SUM_R(bytes)         /* Atomics.store(B_RESERVED, sum of rows)  @cover budget-recomputed-after-steal */
     :: else -> RESERVED = RESERVED - r           /* Atomics.sub(B_RESERVED, bytes) */
     fi;
#endif
     /* (B_RECLAIMED += bytes: a total, not modelled) */
     d_step {
       if
       :: reclaims[w] == 0 -> assert(P5_reclaim_exactly_once && r == truthAtDeath[w])
       :: else ->
          assert(P5_reclaim_exactly_once && r == 0 && (stolen || RESERVED == snapRESERVED));
          k = 0; do :: k < NR -> assert(P5_reclaim_exactly_once && bytes[k] == snapBytes[k]); snapBytes[k] = 0; k++ :: else -> k = 0; break od;
          snapRESERVED = 0
       fi;
       reclaims[w]++; r = 0; stolen = 0 }
     UNLOCK(PTOKEN);                              /* tryReclaimRow(): finally core.unlock() */
     deadSet[w] = 0;                              /* supervisor: .then(() => dead.delete(row)) */
reclaim_end: skip
#endif
     w = 0
#if PRIMARY_OPS > 0 && !defined(BUDGET)
  /* the primary's own Gate.tryAcquire(), then release(): an ordinary core.lock() */
  :: pops < PRIMARY_OPS -> pops++;
     LOCK(PTOKEN);                                   /* tryAcquire(): core.lock() */
     if
     :: atomic { QUEUED == 0 && ACTIVE < MAXP -> ACTIVE++ }   /* tryAcquire(): i32[G_ACTIVE]++ */
        held[PRIMARY]++;                             /* tryAcquire(): i32[this.held]++ */
        atomic { DO_UNLOCK(PTOKEN); believe[PRIMARY]++ }
        atomic { lock == 0 -> believe[PRIMARY]--; lock = PTOKEN }   /* release(): core.lock() */
        d_step { assert(P2_permit_exactly_once && held[PRIMARY] > 0); held[PRIMARY]-- }
        passOnLocked(PTOKEN, handed, k);
        UNLOCK(PTOKEN);
        if :: handed != NONE -> d_step { NOTIFY(handed); handed = NONE } :: else -> skip fi
     :: atomic { !(QUEUED == 0 && ACTIVE < MAXP) -> DO_UNLOCK(PTOKEN) }
     fi
#endif
  :: atomic { ALL_W(FINISHED) } -> break
  od;
  /* Everyone finished or died and was reclaimed: the ledger is idle again. */
#ifndef BUDGET
  assert(P2_permit_exactly_once && lock == 0 && ACTIVE == 0 && QUEUED == 0);
  assert(P2_permit_exactly_once && COUNT(WAITING) == 0 && COUNT(GRANTED) == 0 && ALL_R(IDLE_ROW))
#else
  assert(B1_budget && lock == 0 && RESERVED == 0 && ALL_R(IDLE_ROW))
#endif
}
