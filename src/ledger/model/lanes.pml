/*
 * lanes.pml -- an exhaustive model of the session lanes of the sluice ledger (spin 6).
 *
 * It follows, step by step, the code beside it; each step names the function it stands for:
 *   lanes.ts   Lanes.enter / waitActive / release / withdraw / requestCancel / watchCancel,
 *              freeLocked, wake, oldestQueuedLocked, lowerHwmLocked, reclaimLanesLocked
 *   worker/sessions.ts   LaneTicket (release-once, stopWatch before release)
 *   worker/exchange.ts   enter, then watchCancel, then wait when not ranAtOnce
 *   core.ts, ledger.ts, primary/supervisor.ts   the lock, tryReclaimRow, the exit handler
 *                        (exactly as in ledger.pml; see README "The lanes model")
 * Change both together. README.md (here) says what is abstracted and why, how to run it, and
 * what it found; scripts/verify-model.ts (`npm run verify:model`) runs every configuration.
 *
 * Processes: the primary (init; row 0, token 1: its event loop reclaims each dead worker's
 * row, retrying while a live thread holds the lock), Worker(r) for rows 1..NW (each runs OPS
 * exchanges, one at a time, each in a session it picks), with NC = 1 a Canceller (row NW + 1,
 * makes CANCELS cancel requests), the Killer (stops a worker or the canceller at any step --
 * sleeping, waiting for the lock, or between two writes of a critical section -- at most
 * MAX_DEATHS times), and the Monitor (checks the invariants in every reachable state).
 *
 * Granularity. Every write to a lane cell inside a critical section is its own step, so a
 * death between any two writes is explored; reads inside the lock are folded into the next
 * write. Exceptions, each argued where it is written:
 *   - enter()'s LN_NEXT_TICKET write and its writes of E_OWNER, E_TICKET, E_SESSION_A/B,
 *     E_EXCHANGE (4 words), E_FLAGS and E_CANCEL = 0 are one step: the entry is FREE until
 *     the E_STATE store that commits it, no reader (enter's scan, requestCancel,
 *     oldestQueuedLocked, reclaimLanesLocked, pendingOf, snapshot) looks at a FREE entry's
 *     other fields, no watcher is left on it, and a skipped ticket changes no order;
 *   - the primary's critical section (reclaimLanesLocked, which also lists the `lost`
 *     entries: reads) is one step, and so are its notifies after unlock: it never dies, no
 *     one else writes a lane cell meanwhile, and the other threads only load their own
 *     entry's words there;
 *   - a thread's event (a wake-up, its signal's abort, a watcher's wake-up, its exchange's
 *     end) and the load or lock its handler does first are one step: a handler that runs
 *     late is the same as an event that comes late (waitAsync's compare-and-register stays
 *     atomic, and the MUT_NAIVE_WAIT mutant splits it).
 * Steps that other threads observe outside the lock (the waitAsync registrations, the
 * watchers' loads, every notify) are steps of their own. The model zeroes a FREE entry's
 * stale fields (nobody reads them) so that states differing only there are one state.
 *
 * Properties (each assertion names its property; scripts/verify-model.ts reports the name):
 *   N1_one_active          outside the lock: per session, count(ACTIVE) <= AMAX. At all
 *                          times: per session, the exchanges live threads *believe* run (from
 *                          enter()'s active result or waitActive's resolve until release)
 *                          <= AMAX, and each believer's entry is ACTIVE.
 *   N2_pending_cap         outside the lock: per session, count(non-FREE) <= CAP; a 'full'
 *                          refusal happens only when the session truly has CAP pending, and an
 *                          'entries' refusal only when every entry is in use.
 *   N3_no_lost_wakeup      outside the lock: per session, some QUEUED implies count(ACTIVE) =
 *                          AMAX; and no thread is blocked forever (spin's invalid end state:
 *                          a patient waiter whose promotion is never notified, a cancel that
 *                          never reaches its exchange's watcher, a stuck lock).
 *   N4_derived_counters    outside the lock: LN_PENDING = count(non-FREE), LN_ACTIVE =
 *                          count(ACTIVE), LN_HWM = 1 + the highest non-FREE index (so every
 *                          scan of [0, LN_HWM) sees every live entry).
 *   F1_fifo                per session, entries become ACTIVE in ticket order: a promotion
 *                          takes the session's oldest QUEUED entry, enter() runs at once only
 *                          when none of its session queues, and (AMAX = 1) the exchanges that
 *                          run, i.e. all but those that abort while waiting, start in ticket
 *                          order.
 *   E1_freed_exactly_once  an entry is committed only when FREE and freed only when not FREE;
 *                          a live owner's entry is freed by nobody else (and only by itself,
 *                          or by the reclaim of its row once dead); at the end every entry is
 *                          FREE and nobody holds or waits: each enter() is released,
 *                          withdrawn, or reclaimed, exactly once. (At the end N4 also
 *                          requires every counter to be zero.)
 *   R1_reclaim_exactly_once  the first reclaimRow of a dead row frees exactly the entries the
 *                          row owned when it died (and only them); a second one frees nothing
 *                          and, unless it had to steal the lock from another dead row, changes
 *                          nothing.
 *   L1_lock_discipline     unlock only by the holder.
 *   S2_entry_ownership     a live thread's entry is non-FREE and its own while it holds it.
 *
 * Configuration (-D...): NW workers (1..3), NC canceller (0 or 1), NE entries (2..4), CAP
 * (pending per session, 0 = no cap), AMAX (active per session), NSESS sessions (1 or 2),
 * OPS exchanges per worker and OPS1 for worker 1, MAX_DEATHS, PATIENT / ABORTS / STREAMS
 * (which callers exist: no abort, an AbortSignal that may fire while waiting, a long
 * exchange that ends only by a cancel request or once no cancel can come any more), CANCELS
 * (requests the canceller makes), SPURIOUS (stray wake-ups per wait), DOUBLE_RECLAIM. MUT_*
 * select a deliberate bug (a mutant, which the verifier must catch).
 */

/* ------------------------------------------------------------------ configuration */
/* The defaults are the configuration `lanes-two-sessions-death` of scripts/verify-model.ts. */
#ifndef NW
#define NW 3
#endif
#ifndef NC
#define NC 0
#endif
#ifndef NE
#define NE 3
#endif
#ifndef CAP
#define CAP 2
#endif
#ifndef AMAX
#define AMAX 1
#endif
#ifndef NSESS
#define NSESS 2
#endif
#ifndef OPS
#define OPS 1
#endif
#ifndef OPS1
#define OPS1 OPS
#endif
#define OPS_OF(w) (w == 1 -> OPS1 : OPS)
#ifndef MAX_DEATHS
#define MAX_DEATHS 1
#endif
#ifndef PATIENT
#define PATIENT 1          /* a caller without an AbortSignal that fires */
#endif
#ifndef ABORTS
#define ABORTS 1           /* a caller whose AbortSignal may fire while it waits */
#endif
#ifndef STREAMS
#define STREAMS 0          /* a long exchange: it ends only by a cancel request, or once no
                              cancel request can come any more */
#endif
#ifndef CANCELS
#define CANCELS 1          /* requestCancel calls made by the canceller (with NC = 1) */
#endif
#ifndef SPURIOUS
#define SPURIOUS 0
#endif
#ifndef DOUBLE_RECLAIM
#define DOUBLE_RECLAIM 1
#endif

#define NT (NW + NC)       /* worker rows 1..NT */
#define NR (NT + 1)        /* rows: 0 = the primary */
#define CROW (NW + 1)      /* the canceller's row (NC = 1) */
#define PTOKEN 1

/* layout.ts entry states (model.test.ts checks these against layout.ts) */
#define L_FREE 0
#define L_QUEUED 1
#define L_ACTIVE 2
#define NONE 255

/* a caller */
#define M_PATIENT 1
#define M_ABORT 2
#define M_STREAM 3

/* the kind of free (freeLocked's caller), for the mutants */
#define K_RELEASE 1
#define K_WITHDRAW 2

/* property names: constant, hidden (not in the state vector), shown in assertion messages */
hidden byte N1_one_active = 1;
hidden byte N2_pending_cap = 1;
hidden byte N3_no_lost_wakeup = 1;
hidden byte N4_derived_counters = 1;
hidden byte F1_fifo = 1;
hidden byte E1_freed_exactly_once = 1;
hidden byte R1_reclaim_exactly_once = 1;
hidden byte L1_lock_discipline = 1;
hidden byte S2_entry_ownership = 1;

/* ------------------------------------------------------------------ shared ledger cells */
byte lock;                 /* core.ts H_LOCK: 0 or the holder's token (row + 1) */
byte PENDING;              /* LN_PENDING */
byte ACTIVEN;              /* LN_ACTIVE */
byte HWM;                  /* LN_HWM */
byte NEXT_TICKET;          /* LN_NEXT_TICKET (small here: no wrap) */
byte estate[NE];           /* E_STATE: L_FREE / L_QUEUED / L_ACTIVE (a waitAsync address) */
byte eowner[NE];           /* E_OWNER: row */
byte eticket[NE];          /* E_TICKET */
byte esess[NE];            /* E_SESSION_A/B: the session (0 .. NSESS - 1) */
byte exch[NE];             /* E_EXCHANGE (the exchange's UUID): here its owner's row, one
                              exchange per thread at a time (E_FLAGS: read by no decision) */
bool ecancel[NE];          /* E_CANCEL (a waitAsync address) */
byte sleepS[NR];           /* per thread: 1 + the entry whose E_STATE its pending
                              waitAsync (waitActive) is registered on, 0 = none */
byte sleepC[NR];           /* per thread: 1 + the entry whose E_CANCEL its watchCancel
                              waitAsync is registered on, 0 = none */

/* ------------------------------------------------------------------ thread lifecycle */
bool dying[NR];
bool dead[NR];
bool deadSet[NR];          /* supervisor.ts `dead` */
bool done[NR];
byte reclaims[NR];
byte deaths;

/* ------------------------------------------------------------------ ghosts (not ledger cells) */
byte mine[NR];             /* 1 + the entry a live thread holds (from the commit until it
                              frees it), 0 = none */
byte runS[NR];             /* 1 + the session of the exchange a live thread believes runs */
byte lastActive[NSESS];    /* F1: 1 + the ticket of the session's last entry made ACTIVE */
byte lastRun[NSESS];       /* F1: 1 + the ticket of the session's last exchange that ran */
byte truthAtDeath[NR];     /* R1: entries the row owned when it died */
byte snapPENDING, snapACTIVEN, snapHWM;   /* R1: state before a second reclaimRow */
byte snapState[NE];

/* ------------------------------------------------------------------ sums over entries */
#define IS(i, st, s) ((estate[i] == st && esess[i] == s) -> 1 : 0)
#define NF(i, s, x) ((estate[i] != L_FREE && esess[i] == s) -> 1 : 0)
#define ISH(i, st, s) ((i < HWM && estate[i] == st && esess[i] == s) -> 1 : 0)
#define NFH(i, s, x) ((i < HWM && estate[i] != L_FREE && esess[i] == s) -> 1 : 0)
#define ANY(i, st, x) ((estate[i] == st) -> 1 : 0)
#define NZ(i, x, y) ((estate[i] != L_FREE) -> 1 : 0)
#define OLDQ(i, s, t) (estate[i] == L_QUEUED && esess[i] == s && eticket[i] < t)
#define FREEH(i) (i < HWM && estate[i] == L_FREE)
#define TOPQ(i) (estate[i] != L_FREE)
#define LOWQ(i) (HWM > i && estate[i] != L_FREE)
#if NE == 2
#define SUM_E(M, a, b) (M(0, a, b) + M(1, a, b))
#define OR_E(M, a, b) (M(0, a, b) || M(1, a, b))
#define FIRST_FREE_H (FREEH(0) -> 0 : (FREEH(1) -> 1 : NONE))
#define TOP (TOPQ(1) -> 2 : (TOPQ(0) -> 1 : 0))
#define LOWERED (LOWQ(1) -> 2 : (LOWQ(0) -> 1 : 0))
#elif NE == 3
#define SUM_E(M, a, b) (M(0, a, b) + M(1, a, b) + M(2, a, b))
#define OR_E(M, a, b) (M(0, a, b) || M(1, a, b) || M(2, a, b))
#define FIRST_FREE_H (FREEH(0) -> 0 : (FREEH(1) -> 1 : (FREEH(2) -> 2 : NONE)))
#define TOP (TOPQ(2) -> 3 : (TOPQ(1) -> 2 : (TOPQ(0) -> 1 : 0)))
#define LOWERED (LOWQ(2) -> 3 : (LOWQ(1) -> 2 : (LOWQ(0) -> 1 : 0)))
#elif NE == 4
#define SUM_E(M, a, b) (M(0, a, b) + M(1, a, b) + M(2, a, b) + M(3, a, b))
#define OR_E(M, a, b) (M(0, a, b) || M(1, a, b) || M(2, a, b) || M(3, a, b))
#define FIRST_FREE_H (FREEH(0) -> 0 : (FREEH(1) -> 1 : (FREEH(2) -> 2 : (FREEH(3) -> 3 : NONE))))
#define TOP (TOPQ(3) -> 4 : (TOPQ(2) -> 3 : (TOPQ(1) -> 2 : (TOPQ(0) -> 1 : 0))))
#define LOWERED (LOWQ(3) -> 4 : (LOWQ(2) -> 3 : (LOWQ(1) -> 2 : (LOWQ(0) -> 1 : 0))))
#else
#error "NE must be 2..4"
#endif

#define ACT(s) SUM_E(IS, L_ACTIVE, s)           /* ACTIVE entries of session s */
#define QUE(s) SUM_E(IS, L_QUEUED, s)           /* QUEUED entries of session s */
#define PEND(s) SUM_E(NF, s, 0)                 /* non-FREE entries of session s */
#define ACT_H(s) SUM_E(ISH, L_ACTIVE, s)        /* the same, counted by enter()'s scan of [0, LN_HWM) */
#define QUE_H(s) SUM_E(ISH, L_QUEUED, s)
#define PEND_H(s) SUM_E(NFH, s, 0)
#define ALL_ACTIVE SUM_E(ANY, L_ACTIVE, 0)
#define ALL_NONFREE SUM_E(NZ, 0, 0)
#define OLDER_QUEUED(s, t) OR_E(OLDQ, s, t)

/* ------------------------------------------------------------------ sums over rows */
#if NR == 2
#define ALL_R(P) (P(0) && P(1))
#define ALL_W(P) (P(1))
#define SUM_R(P, s) (P(0, s) + P(1, s))
#elif NR == 3
#define ALL_R(P) (P(0) && P(1) && P(2))
#define ALL_W(P) (P(1) && P(2))
#define SUM_R(P, s) (P(0, s) + P(1, s) + P(2, s))
#elif NR == 4
#define ALL_R(P) (P(0) && P(1) && P(2) && P(3))
#define ALL_W(P) (P(1) && P(2) && P(3))
#define SUM_R(P, s) (P(0, s) + P(1, s) + P(2, s) + P(3, s))
#elif NR == 5
#define ALL_R(P) (P(0) && P(1) && P(2) && P(3) && P(4))
#define ALL_W(P) (P(1) && P(2) && P(3) && P(4))
#define SUM_R(P, s) (P(0, s) + P(1, s) + P(2, s) + P(3, s) + P(4, s))
#else
#error "NW + NC must be 1..4"
#endif

/* the lane invariants, lanes.ts header (N1-N4), per session */
#define N1S(s) (ACT(s) <= AMAX)
#define N2S(s) (CAP == 0 || PEND(s) <= CAP)
#define N3S(s) (QUE(s) == 0 || ACT(s) == AMAX)
#define RUNNING_IN(t, s) (runS[t] == s + 1 -> 1 : 0)
#define BEL1S(s) (SUM_R(RUNNING_IN, s) <= AMAX)
#if NSESS == 1
#define PER_SESSION(P) (P(0))
#else
#define PER_SESSION(P) (P(0) && P(1))
#endif
#define N4 (PENDING == ALL_NONFREE && ACTIVEN == ALL_ACTIVE && HWM == TOP)
/* a live holder's entry is its own and in use; a believed-running exchange's entry is ACTIVE */
#define OWN(t) (mine[t] == 0 -> 1 : (estate[mine[t] - 1] != L_FREE && eowner[mine[t] - 1] == t))
#define RUNOK(t) (runS[t] == 0 -> 1 : (mine[t] != 0 && estate[mine[t] - 1] == L_ACTIVE && esess[mine[t] - 1] + 1 == runS[t]))
#define IDLE_ROW(t) (mine[t] == 0 && runS[t] == 0 && sleepS[t] == 0 && sleepC[t] == 0)
#define LANES_OK (ALL_R(OWN) && ALL_R(RUNOK) && PER_SESSION(BEL1S) && \
                  (lock != 0 || (PER_SESSION(N1S) && PER_SESSION(N2S) && PER_SESSION(N3S) && N4)))

/* ------------------------------------------------------------------ core.ts: the lock */
#define LOCK(tok) atomic { lock == 0 -> lock = tok }
#define DO_UNLOCK(tok) assert(L1_lock_discipline && lock == tok); lock = 0
#define UNLOCK(tok) atomic { DO_UNLOCK(tok) }

/* Atomics.notify on an entry's E_STATE (S) or E_CANCEL (C): every waitAsync registered on it
   resolves. Used inside d_step: one atomic step. */
#define WAKES(t, e) if :: sleepS[t] == e + 1 -> sleepS[t] = 0 :: else -> skip fi
#define WAKEC(t, e) if :: sleepC[t] == e + 1 -> sleepC[t] = 0 :: else -> skip fi
#if NR == 2
#define NOTIFY_S(e) WAKES(1, e)
#define NOTIFY_C(e) WAKEC(1, e)
#elif NR == 3
#define NOTIFY_S(e) WAKES(1, e); WAKES(2, e)
#define NOTIFY_C(e) WAKEC(1, e); WAKEC(2, e)
#elif NR == 4
#define NOTIFY_S(e) WAKES(1, e); WAKES(2, e); WAKES(3, e)
#define NOTIFY_C(e) WAKEC(1, e); WAKEC(2, e); WAKEC(3, e)
#else
#define NOTIFY_S(e) WAKES(1, e); WAKES(2, e); WAKES(3, e); WAKES(4, e)
#define NOTIFY_C(e) WAKEC(1, e); WAKEC(2, e); WAKEC(3, e); WAKEC(4, e)
#endif

/* A FREE entry's other fields are read by nobody (see Granularity) and overwritten before
   its next commit: the model zeroes them once the critical section that freed it no longer
   reads them, so states that differ only in a FREE entry's stale fields are one state. */
#define CLEAR(i) eowner[i] = 0; eticket[i] = 0; esess[i] = 0; EXCH(i, 0); ecancel[i] = 0
/* F1's ghosts of a session with no entry left: every later entry has a newer ticket anyway */
#define FORGET(s) if :: PEND(s) == 0 -> lastActive[s] = 0; lastRun[s] = 0 :: else -> skip fi
#if NC > 0
#define EXCH(i, v) exch[i] = v
#else
#define EXCH(i, v) skip                    /* read only by requestCancel */
#endif

/* lanes.ts oldestQueuedLocked(hwm, session): the QUEUED entry of session s with the oldest
   ticket among [0, LN_HWM), or NONE. Reads only (inside the lock). */
inline oldestQueued(best, s, k) {
  best = NONE;
  k = 0;
  do
  :: k < NE && k < HWM ->
     if
#if defined(MUT_PROMOTE_BY_INDEX)
     /* MUTANT: the session's first QUEUED entry by index, not the oldest ticket */
     :: estate[k] == L_QUEUED && esess[k] == s && best == NONE -> best = k
#elif defined(MUT_PROMOTE_ANY_SESSION)
     /* MUTANT: the oldest QUEUED entry of any session */
     :: estate[k] == L_QUEUED && (best == NONE || eticket[k] < eticket[best]) -> best = k
#else
     :: estate[k] == L_QUEUED && esess[k] == s && (best == NONE || eticket[k] < eticket[best]) -> best = k
#endif
     :: else -> skip
     fi;
     k++
  :: else -> break
  od;
  k = 0
}

/* A QUEUED -> ACTIVE store (Atomics.store(E_STATE, LANE_ACTIVE)), with the F1 ghosts. */
inline promoteStore(n) {
  assert(F1_fifo && estate[n] == L_QUEUED && !OLDER_QUEUED(esess[n], eticket[n]));
  assert(F1_fifo && eticket[n] + 1 > lastActive[esess[n]]);
  lastActive[esess[n]] = eticket[n] + 1;
  estate[n] = L_ACTIVE
}

/* lanes.ts freeLocked(entry, st): free `e` (held by this thread, state st), promote the
   session's oldest QUEUED entry if e was ACTIVE (returned in nxt, notified after unlock),
   lower LN_HWM. `kind` (release / withdraw) only selects mutants. */
#define LOWER_HWM(e) HWM = LOWERED; FORGET(esess[e]); CLEAR(e)
inline freeLocked(me, e, st, nxt, k, kind) {
  atomic {                                           /* Atomics.store(E_STATE, LANE_FREE) */
    assert(E1_freed_exactly_once && estate[e] != L_FREE && eowner[e] == me);
    st = estate[e]; estate[e] = L_FREE; mine[me] = 0 }
  PENDING--;                                         /* i32[LN_PENDING]-- */
  if
  :: d_step { st != L_ACTIVE -> LOWER_HWM(e) }       /* lowerHwmLocked(); return -1 */
  :: atomic { st == L_ACTIVE -> ACTIVEN-- }          /* i32[LN_ACTIVE]-- */
     d_step {                                        /* next = oldestQueuedLocked(...) */
       oldestQueued(nxt, esess[e], k);
#ifdef MUT_RELEASE_NO_PROMOTE
       if :: kind == K_RELEASE -> nxt = NONE :: else -> skip fi;   /* MUTANT: release never promotes */
#endif
#ifdef MUT_WITHDRAW_NO_PROMOTE
       if :: kind == K_WITHDRAW -> nxt = NONE :: else -> skip fi;  /* MUTANT: an abort that lost the race frees without promoting */
#endif
       if
       :: nxt != NONE -> promoteStore(nxt)           /* Atomics.store(next, LANE_ACTIVE) */
       :: else -> LOWER_HWM(e)                       /* (nothing to promote) lowerHwmLocked() */
       fi }
     if
     :: atomic { nxt != NONE -> ACTIVEN++ }          /* i32[LN_ACTIVE]++ (a promotion: its cover events are
                                                        promoted-notified and abort-after-promote, at the call
                                                        sites; in an inline pan reports every copy) */
        d_step { LOWER_HWM(e) }                      /* lowerHwmLocked() */
     :: nxt == NONE
     fi
  fi
}

/* ================================================================== a worker: exchanges */
#ifdef MUT_ENTER_IGNORES_QUEUE
#define RUNNOW(s) (ACT_H(s) < AMAX)                 /* MUTANT (equivalent): ignores the queue */
#else
#define RUNNOW(s) (QUE_H(s) == 0 && ACT_H(s) < AMAX)   /* enter(): queued === 0 && active < max */
#endif
#ifdef MUT_CAP_OFF_BY_ONE
#define FULL(s) (CAP > 0 && PEND_H(s) > CAP)         /* MUTANT: pending > cap */
#else
#define FULL(s) (CAP > 0 && PEND_H(s) >= CAP)        /* enter(): cap > 0 && pending >= cap */
#endif
/* ticket = LN_NEXT_TICKET; i32[LN_NEXT_TICKET] = ticket + 1; E_OWNER, E_TICKET, E_SESSION_A/B,
   E_EXCHANGE x4, E_FLAGS; Atomics.store(E_CANCEL, 0): one step (see Granularity) */
#define FIELDS tk = NEXT_TICKET; NEXT_TICKET++; eowner[e] = me; eticket[e] = tk; esess[e] = s; EXCH(e, me); ecancel[e] = 0
/* the exchange starts (the thread believes it runs): enter() said active, or waitActive resolved */
#if AMAX == 1
#define RUN_START runS[me] = s + 1; \
  assert(F1_fifo && eticket[e] + 1 > lastRun[s]);  /* those that run, run in ticket order */ \
  lastRun[s] = eticket[e] + 1
#else
#define RUN_START runS[me] = s + 1
#endif
/* the exchange ends, LaneTicket.release(): stopWatch() (live = false; notify(E_CANCEL): our
   own watcher ends), then Lanes.release(entry): core.lock(). One step: nothing in between
   is observable. */
#define END_AND_LOCK lock == 0 -> lock = me + 1; runS[me] = 0; watching = 0; sleepC[me] = 0
#define QUIET (NC == 0 || done[CROW] || dead[CROW])   /* no cancel request can come any more */

proctype Worker(byte me) {         /* row me, token me + 1 */
  byte op;                         /* exchanges started */
  byte e = NONE;                   /* the entry: enter()'s result */
  byte s;                          /* the exchange's session */
  byte mode;                       /* its caller: M_PATIENT / M_ABORT / M_STREAM */
  byte tk;                         /* enter(): the ticket taken */
  byte st;                         /* freeLocked: the state freed */
  byte nxt = NONE;                 /* freeLocked: the entry promoted */
  byte k;
  byte spur;
  bool ranAtOnce;                  /* enter(): { active: true } */
  bool watching;                   /* the cancel watcher is live (watchCancel's `live`) */
  bool cancelled;                  /* onCancel ran: ac.abort(exchange_cancelled) */
  {
  do
  /* ---------------------------------------------------------------- Lanes.enter() */
  /* exchange.ts: signal not aborted; enter(): core.lock(). The caller and the session are
     the environment's choice; starting and winning the lock are one step (nothing is
     written before). The scan's reads are folded into the first write. */
  :: atomic { op < OPS_OF(me) && lock == 0 -> op++; lock = me + 1;
       if
       :: s = 0
       :: NSESS > 1 -> s = 1
       fi;
       if
       :: PATIENT -> mode = M_PATIENT
       :: ABORTS -> mode = M_ABORT
       :: STREAMS -> mode = M_STREAM
       fi }
     if
     /* cap > 0 && pending >= cap: refused 'full' (bump(LT_REFUSED_FULL): a total) */
     :: atomic { FULL(s) ->
          assert(N2_pending_cap && PEND(s) >= CAP);        /* refused only at the cap */
          DO_UNLOCK(me + 1); s = 0; mode = 0 }             /* core.unlock(); prompt_queue_full  @cover refused-full */
     /* free < 0 && hwm >= LN_ENTRIES: refused 'entries' */
     :: atomic { !FULL(s) && FIRST_FREE_H == NONE && HWM >= NE ->
          assert(N2_pending_cap && ALL_NONFREE == NE);      /* refused only when every entry is in use */
          DO_UNLOCK(me + 1); s = 0; mode = 0 }             /* core.unlock(); capacity_exhausted  @cover refused-entries */
     /* free < 0: free = hwm; i32[LN_HWM] = hwm + 1 */
     :: atomic { !FULL(s) && FIRST_FREE_H == NONE && HWM < NE -> e = HWM; HWM = HWM + 1 }   /* @cover hwm-raised */
        d_step { FIELDS };
        goto commit
     /* the first FREE entry below LN_HWM */
     :: d_step { !FULL(s) && FIRST_FREE_H != NONE -> e = FIRST_FREE_H; FIELDS }   /* @cover entry-reused */
commit:
        atomic {                                         /* Atomics.store(E_STATE, runNow ? ACTIVE : QUEUED): the commit */
          assert(E1_freed_exactly_once && estate[e] == L_FREE);
          if
          :: RUNNOW(s) ->
             assert(F1_fifo && QUE(s) == 0);             /* never ahead of a queued entry of its session */
             assert(F1_fifo && tk + 1 > lastActive[s]);
             lastActive[s] = tk + 1;
             estate[e] = L_ACTIVE; ranAtOnce = 1         /* @cover runs-at-once */
          :: else -> estate[e] = L_QUEUED                /* @cover queued */
          fi;
          mine[me] = e + 1; tk = 0 }
        PENDING++;                                       /* i32[LN_PENDING]++ */
        if
        :: atomic { ranAtOnce -> ACTIVEN++ }             /* if (runNow) i32[LN_ACTIVE]++ */
           atomic { DO_UNLOCK(me + 1); RUN_START }       /* core.unlock(); return { ok, entry, active: true } */
        :: atomic { !ranAtOnce -> DO_UNLOCK(me + 1) }    /* core.unlock(); return { ok, entry, active: false } */
        fi;
#if NC > 0
        /* exchange.ts: lane.watchCancel(...) -> Lanes.watchCancel: watch(): load(E_CANCEL) !== 0
           -> onCancel(); else Atomics.waitAsync(E_CANCEL, 0) (compare and register: one step) */
        if
        :: atomic { ecancel[e] != 0 -> cancelled = 1 }  /* onCancel() at once */
        :: atomic { ecancel[e] == 0 -> sleepC[me] = e + 1; watching = 1 }
        fi;
#endif
        if
        :: ranAtOnce -> goto running
        :: else -> skip
        fi;
        /* ---- LaneTicket.wait(signal) -> Lanes.waitActive(entry, signal) ----
           waitActive(): load(E_STATE) === ACTIVE: resolve at once; else the promise:
           signal.aborted (onCancel above aborted it) -> onAbort(); else watch():
           load === ACTIVE -> resolve, else Atomics.waitAsync(E_STATE, LANE_QUEUED) */
        if
        :: atomic { estate[e] == L_ACTIVE -> RUN_START }; goto running
        :: atomic { estate[e] != L_ACTIVE && cancelled && lock == 0 -> lock = me + 1 }; goto withdraw
#ifdef MUT_NAIVE_WAIT
        /* MUTANT: "state is QUEUED?" then "sleep" as two steps: a notify in between is lost */
        :: !cancelled && estate[e] == L_QUEUED -> sleepS[me] = e + 1
#else
        /* waitAsync compares and registers in one step */
        :: atomic { !cancelled && estate[e] == L_QUEUED -> sleepS[me] = e + 1 }   /* @cover waitasync-sleeps */
#endif
        fi;
        do                                               /* the thread's event loop, the wait pending */
        /* r.value resolved (a notify, or a stray wake-up): watch() again. The wake-up and the
           callback's load are one step: the callback running late is the notify coming late. */
        :: atomic { sleepS[me] == 0 && estate[e] == L_ACTIVE -> RUN_START }; goto running   /* @cover woken-active */
#ifdef MUT_NAIVE_WAIT
        :: sleepS[me] == 0 && estate[e] == L_QUEUED -> sleepS[me] = e + 1
#else
        :: atomic { sleepS[me] == 0 && estate[e] == L_QUEUED -> sleepS[me] = e + 1 }
#endif
        :: atomic { sleepS[me] == 0 && estate[e] == L_FREE -> assert(S2_entry_ownership && false) }
        /* the signal's 'abort' event: onAbort() -> withdraw(): core.lock() (the event and the
           lock are one step: an abort whose lock wait is long is an abort that comes late) */
        :: atomic { mode == M_ABORT && lock == 0 -> lock = me + 1; sleepS[me] = 0 }; goto withdraw   /* @cover client-abort */
#if NC > 0
        /* the cancel watcher's waitAsync resolved: watch(): flag set -> onCancel() ->
           ac.abort() -> onAbort() synchronously -> withdraw(); else wait again */
        :: atomic { watching && sleepC[me] == 0 && ecancel[e] != 0 && lock == 0 ->
             cancelled = 1; watching = 0; lock = me + 1; sleepS[me] = 0 }; goto withdraw   /* @cover cancel-while-queued */
        :: atomic { watching && sleepC[me] == 0 && ecancel[e] == 0 -> sleepC[me] = e + 1 }
#endif
#if SPURIOUS > 0
        :: atomic { spur < SPURIOUS && sleepS[me] != 0 -> sleepS[me] = 0; spur++ }   /* a stray wake-up  @cover spurious-wake */
#endif
        od;
running:                                                 /* the exchange runs, then releases its entry */
        do
        :: atomic { mode != M_STREAM && END_AND_LOCK }; break          /* it ends (or its client leaves) */
        :: atomic { mode == M_STREAM && !ecancel[e] && QUIET && END_AND_LOCK }; break   /* no cancel can come any more */
        :: atomic { cancelled && END_AND_LOCK }; break                  /* onCancel aborted it  @cover cancel-while-running */
#if NC > 0
        :: atomic { watching && sleepC[me] == 0 && ecancel[e] != 0 -> cancelled = 1; watching = 0 }   /* the watcher wakes: onCancel() */
        :: atomic { watching && sleepC[me] == 0 && ecancel[e] == 0 -> sleepC[me] = e + 1 }
#endif
        od;
        /* release(): st === FREE || owner !== row would throw (bump(LT_RELEASED): a total) */
        freeLocked(me, e, st, nxt, k, K_RELEASE);
        UNLOCK(me + 1);                                  /* core.unlock() */
        goto wake;
withdraw:                                                /* withdraw(entry), the lock held */
        if
        :: estate[e] == L_QUEUED ->                      /* bump(LT_CANCELS)  @cover withdraw-queued */
           freeLocked(me, e, st, nxt, k, K_WITHDRAW)
        :: estate[e] == L_ACTIVE ->                      /* the promotion won: bump(LT_CANCEL_AFTER_PROMOTE)  @cover abort-after-promote */
           freeLocked(me, e, st, nxt, k, K_WITHDRAW)
        :: estate[e] == L_FREE -> assert(S2_entry_ownership && false)   /* only a reclaim frees a live owner's entry */
        fi;
        UNLOCK(me + 1);                                  /* core.unlock() */
wake:   /* wake(entry, promoted): notify our own entry, then the promoted one; LaneTicket: the
           catch of wait() sets released and calls stopWatch() (a no-op after release) */
        if
        :: d_step { nxt != NONE -> NOTIFY_S(e); watching = 0; sleepC[me] = 0 }
           d_step { NOTIFY_S(nxt); nxt = NONE;            /* @cover promoted-notified */
                    e = NONE; s = 0; mode = 0; st = 0; k = 0; spur = 0; ranAtOnce = 0; cancelled = 0 }
        :: d_step { nxt == NONE -> NOTIFY_S(e); watching = 0; sleepC[me] = 0;
                    e = NONE; s = 0; mode = 0; st = 0; k = 0; spur = 0; ranAtOnce = 0; cancelled = 0 }
        fi
     fi
  :: atomic { op == OPS_OF(me) -> done[me] = 1 }; break
  od
  } unless {
    /* DEATH (out of memory, terminate()): the thread stops wherever it is. */
    atomic { dying[me] ->
      truthAtDeath[me] = 0;
      k = 0;
      do
      :: k < NE -> if :: estate[k] != L_FREE && eowner[k] == me -> truthAtDeath[me]++ :: else -> skip fi; k++
      :: else -> k = 0; break
      od;
      mine[me] = 0; runS[me] = 0; sleepS[me] = 0; sleepC[me] = 0; dead[me] = 1;   /* @cover death */
      op = 0; e = NONE; s = 0; mode = 0; tk = 0; st = 0; nxt = NONE; spur = 0;
      ranAtOnce = 0; watching = 0; cancelled = 0 }
  }
}

/* ================================================================== the canceller */
/* Lanes.requestCancel(session, exchange | null), from another worker (a non-blocking cancel,
   JSON-RPC session/cancel): flag the session's entries (only the exchange's when given)
   under the lock, then notify each flagged E_CANCEL after unlock. */
#if NC > 0
proctype Canceller(byte me) {
  byte c;                          /* requests made */
  byte s;                          /* the session */
  byte x;                          /* the exchange: 0 = null (all of the session), else a row */
  byte k;
  byte m;                          /* the flagged entries (bit mask), notified after unlock */
  {
  do
  :: atomic { c < CANCELS && lock == 0 -> c++; lock = me + 1;   /* requestCancel(): core.lock() */
       if
       :: s = 0
       :: NSESS > 1 -> s = 1
       fi;
       if
       :: x = 0
       :: x = 1
#if NW > 1
       :: x = 2
#endif
       fi }
     k = 0;
     do                                              /* for e < hwm: non-FREE, session, exchange, flag 0 */
     :: atomic { k < NE && k < HWM && estate[k] != L_FREE && esess[k] == s && (x == 0 || exch[k] == x) && !ecancel[k] ->
          ecancel[k] = 1; m = m | (1 << k); k++ }    /* Atomics.store(E_CANCEL, 1)  @cover cancel-flagged */
     :: atomic { k < NE && k < HWM && !(estate[k] != L_FREE && esess[k] == s && (x == 0 || exch[k] == x) && !ecancel[k]) -> k++ }
     :: k >= NE || k >= HWM -> k = 0; break
     od;
     UNLOCK(me + 1);                                 /* core.unlock() (bump(LT_CANCEL_REQUESTS): a total) */
     do                                              /* for (const idx of flagged) Atomics.notify(i32, idx) */
     :: k < NE && (m & (1 << k)) -> d_step { NOTIFY_C(k); m = m & ~(1 << k); k++ }
     :: k < NE && !(m & (1 << k)) -> k++
     :: k >= NE -> k = 0; break
     od
  :: atomic { c == CANCELS -> done[me] = 1 }; break
  od
  } unless {
    atomic { dying[me] -> truthAtDeath[me] = 0; dead[me] = 1; c = 0; s = 0; x = 0; k = 0; m = 0 }   /* @cover canceller-death */
  }
}
#endif

/* ================================================================== the killer */
#if MAX_DEATHS > 0
#define KILL(w) :: atomic { deaths < MAX_DEATHS && !done[w] && !dying[w] -> dying[w] = 1; deaths++ }
active proctype Killer() {
end_killer:
  do
  KILL(1)
#if NT > 1
  KILL(2)
#endif
#if NT > 2
  KILL(3)
#endif
#if NT > 3
  KILL(4)
#endif
  od
}
#endif

/* ================================================================== the monitor */
/* Enabled only in a state that breaks an invariant; then the failing assertion names it. */
active proctype Monitor() {
end_monitor:
  atomic { !LANES_OK ->
    assert(S2_entry_ownership && ALL_R(OWN));
    assert(N1_one_active && ALL_R(RUNOK) && PER_SESSION(BEL1S));
    assert(N1_one_active && (lock != 0 || PER_SESSION(N1S)));
    assert(N2_pending_cap && (lock != 0 || PER_SESSION(N2S)));
    assert(N3_no_lost_wakeup && (lock != 0 || PER_SESSION(N3S)));
    assert(N4_derived_counters && (lock != 0 || N4)) }
}

/* ================================================================== the primary */
/* As in ledger.pml: an exit event adds the row to the dead set and runs tryReclaimRow (its
   first attempt in the same turn), which takes a free lock, steals it from a row in the dead
   set, or gives up and retries on a later turn; with DOUBLE_RECLAIM a second reclaimRow of
   the row may come at any later time. The primary never dies and nobody else writes a lane
   cell while it holds the lock, so its critical section is one atomic step: other threads
   only observe E_STATE words there (each its own entry's), and those observations commute. */
#if DOUBLE_RECLAIM
#define AGAIN(W) :: reclaims[W] == 1 -> w = W
#else
#define AGAIN(W)
#endif
#define PICK(W) :: dead[W] && reclaims[W] == 0 -> deadSet[W] = 1; w = W AGAIN(W)
#define FINISHED(W) (done[W] || reclaims[W] > 0)

init {
  byte w, r, k, j, n, stolen;
  byte nmask;                                  /* E_STATE words to notify after unlock */
  byte cmask;                                  /* E_CANCEL words to notify after unlock */
  atomic {
    run Worker(1);
#if NW > 1
    run Worker(2);
#endif
#if NW > 2
    run Worker(3);
#endif
#if NC > 0
    run Canceller(CROW);
#endif
  }
  do                                           /* the primary's event loop */
  :: atomic {
       if                                      /* the exit event (dead.add), or a retry, or a second reclaimRow */
       PICK(1)
#if NT > 1
       PICK(2)
#endif
#if NT > 2
       PICK(3)
#endif
#if NT > 3
       PICK(4)
#endif
       fi;
       /* ---------------------------------------------------- Ledger.tryReclaimRow(w) */
       if                                      /* core.tryLockForRepair(dead token) */
       :: lock == 0 -> lock = PTOKEN; stolen = 0
       :: lock > PTOKEN && (lock == w + 1 || deadSet[lock - 1]) ->   /* 'stolen'  @cover lock-stolen-from-dead */
          lock = PTOKEN; stolen = 1
       :: lock > PTOKEN && !(lock == w + 1 || deadSet[lock - 1]) ->  /* null: retry on a later turn  @cover reclaim-retried */
          w = 0; goto reclaim_end
       fi;
       if
       :: reclaims[w] > 0 ->                   /* a second reclaimRow(w): R1's snapshot  @cover reclaim-twice */
          snapPENDING = PENDING; snapACTIVEN = ACTIVEN; snapHWM = HWM;
          k = 0; do :: k < NE -> snapState[k] = estate[k]; k++ :: else -> k = 0; break od
       :: else -> skip
       fi }
     /* (reclaimGateLocked x 2 run before this: other cells, see ledger.pml) */
     /* ---- reclaimLanesLocked(core, row): one atomic step (atomic rather than d_step only
        so that pan reports its lines for the vacuity check's markers) ---- */
     atomic {
       /* every entry the row owns -> FREE; reclaimed++ */
       k = 0;
       do
       :: k < NE ->
          if
          :: estate[k] != L_FREE && eowner[k] == w ->
             assert(R1_reclaim_exactly_once && dead[w]);
             estate[k] = L_FREE; FORGET(esess[k]); CLEAR(k); r++   /* @cover reclaim-frees */
          :: else -> skip
          fi;
          k++
       :: else -> k = 0; break
       od;
#ifndef MUT_RECLAIM_KEEPS_HWM
       HWM = TOP;                              /* hwm = 1 + the highest non-FREE entry of the whole table */
#endif
#ifndef MUT_RECLAIM_NO_PROMOTE
       /* per session: promote the oldest QUEUED entry while the session runs fewer than
          LN_ACTIVE_MAX (for e < hwm, QUEUED: while (activeOf(k) < activeMax) ...) */
       j = 0;
       do
       :: j < NE && j < HWM ->
          if
          :: estate[j] == L_QUEUED ->
             do
             :: ACT(esess[j]) < AMAX ->
                oldestQueued(n, esess[j], k);
                if
                :: n == NONE -> break
                :: else -> promoteStore(n); nmask = nmask | (1 << n); n = NONE   /* @cover reclaim-promotes */
                fi
             :: else -> break
             od
          :: else -> skip
          fi;
          j++
       :: else -> j = 0; break
       od;
#endif
#ifdef MUT_RECLAIM_NO_RECOMPUTE
       PENDING = PENDING - r;                  /* MUTANT: adjusts the counters by what was freed ... */
       ACTIVEN = ALL_ACTIVE;                   /* ... instead of counting them (LN_PENDING) */
#else
       PENDING = ALL_NONFREE;                  /* Atomics.store(LN_PENDING, pending) */
       ACTIVEN = ALL_ACTIVE;                   /* Atomics.store(LN_ACTIVE, active) */
#endif
#ifndef MUT_RECLAIM_NO_RENOTIFY
       /* notify: every ACTIVE entry (its promoter may have died between its store and its
          notify). The mutant notifies only the entries this reclaim promoted. */
       k = 0;
       do
       :: k < NE -> if :: estate[k] == L_ACTIVE -> nmask = nmask | (1 << k) :: else -> skip fi; k++
       :: else -> k = 0; break
       od;
#endif
#if NC > 0 && !defined(MUT_RECLAIM_NO_CANCEL_NOTIFY)
       /* and every flagged entry's E_CANCEL (its requester may have died between its store
          and its notify: D4). The mutant is the code before the D4 fix. */
       k = 0;
       do
       :: k < NE -> if :: estate[k] != L_FREE && ecancel[k] -> cmask = cmask | (1 << k) :: else -> skip fi; k++
       :: else -> k = 0; break
       od;
#endif
       /* (reclaimBytesLocked, R_STATE, totals: other cells) */
       /* R1: the first reclaim freed what the row held; a second one nothing, and changed
          nothing unless it stole the lock from another dead row (whose half-done critical
          section it then legitimately repairs) */
       if
       :: reclaims[w] == 0 -> assert(R1_reclaim_exactly_once && r == truthAtDeath[w])
       :: else ->
          assert(R1_reclaim_exactly_once && r == 0);
          assert(R1_reclaim_exactly_once && (stolen || (PENDING == snapPENDING && ACTIVEN == snapACTIVEN && HWM == snapHWM)));
          k = 0; do :: k < NE -> assert(R1_reclaim_exactly_once && (stolen || estate[k] == snapState[k])); snapState[k] = 0; k++ :: else -> k = 0; break od;
          snapPENDING = 0; snapACTIVEN = 0; snapHWM = 0
       fi;
       reclaims[w]++; r = 0; stolen = 0 }
     UNLOCK(PTOKEN);                           /* tryReclaimRow(): finally core.unlock() */
     /* for (const idx of notify) Atomics.notify(core.i32, idx): one step (the primary does not
        die; a thread woken early is one that is slow to run after a later notify) */
     d_step {
       k = 0;
       do
       :: k < NE -> if :: nmask & (1 << k) -> NOTIFY_S(k) :: else -> skip fi;
                    if :: cmask & (1 << k) -> NOTIFY_C(k) :: else -> skip fi; k++
       :: else -> k = 0; break
       od;
       nmask = 0; cmask = 0;
       deadSet[w] = 0;                         /* supervisor: dead.delete(row) */
       w = 0 }
reclaim_end: skip
  :: atomic { ALL_W(FINISHED) } -> break
  od;
  /* Everyone finished or died and was reclaimed: the lanes are idle again. */
  assert(E1_freed_exactly_once && lock == 0 && ALL_NONFREE == 0 && ALL_R(IDLE_ROW));
  assert(N4_derived_counters && PENDING == 0 && ACTIVEN == 0 && HWM == 0)
}
