/*
 * scenarios.h - the session scenarios of clients/conformance/SESSIONS.md in
 * their order, as X(id, function) for the C and C++ scenario programs.
 */
#ifndef LC_SCENARIOS_H
#define LC_SCENARIOS_H

#define LC_SESSION_SCENARIOS(X)                                                                     \
    X("s-acquire-release", s_acquire_release) X("s-try-busy", s_try_busy)                          \
    X("s-wait-bound", s_wait_bound) X("s-cancel", s_cancel) X("s-stale-release", s_stale_release)  \
    X("s-lease-expiry", s_lease_expiry) X("s-kill-client", s_kill_client) X("s-resume", s_resume)  \
    X("s-leader-stop", s_leader_stop) X("s-leader-kill", s_leader_kill)                            \
    X("s-tls-token", s_tls_token) X("s-modes", s_modes) X("s-note", s_note)                        \
    X("s-big-token", s_big_token) X("s-silent-server", s_silent_server)                            \
    X("s-fifo-mixed", s_fifo_mixed)

#endif
