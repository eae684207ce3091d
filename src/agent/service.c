/* SPDX-License-Identifier: Apache-2.0 */
/* service.c - systemd readiness notifications through libsystemd's
 * sd_notify(); no-ops when built without it. */
#include "service.h"

#include "autoconfig.h"

#ifdef HAVE_SYSTEMD
#include <systemd/sd-daemon.h>

/* unset_environment = 0: the workers and a later reload keep $NOTIFY_SOCKET. */
static void send_state(const char *state)
{
    (void)sd_notify(0, state);
}
#else
static void send_state(const char *state)
{
    (void)state;
}
#endif

void service_ready(void)
{
    send_state("READY=1");
}

void service_reloading(void)
{
    send_state("RELOADING=1");
}

void service_stopping(void)
{
    send_state("STOPPING=1");
}
