/* SPDX-License-Identifier: Apache-2.0 */
/* service.h - tell the service manager what the agent is doing (systemd's
 * Type=notify readiness protocol, sd_notify(3)).
 *
 * READY=1 once the SPOP listener is open, so that `systemctl start` returns
 * (and HAProxy, ordered after the unit, starts) only when the agent answers;
 * RELOADING=1 then READY=1 around a SIGHUP reload, so that `systemctl reload`
 * returns once the new file is in force (or refused); STOPPING=1 on SIGTERM.
 *
 * Outside systemd (no $NOTIFY_SOCKET) and in builds without libsystemd
 * (configure --without-systemd) every call does nothing. Errors are ignored:
 * a missed notification must never stop the agent. Main thread only.
 */
#ifndef SERVICE_H
#define SERVICE_H

void service_ready(void);
void service_reloading(void);
void service_stopping(void);

#endif
