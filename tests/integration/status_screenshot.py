# SPDX-License-Identifier: Apache-2.0
"""The status page under load, as a PNG for the docs (doc/status-page.png):
redis-server, one agent with the kit's rules, HAProxy 2.6 (the kit) and
traffic from a few clients, some of them far over their limit, for a while;
then headless Chromium takes the picture. `make screenshot` runs it.

    python3 status_screenshot.py OUT.png [SECONDS]"""
import os
import sys
import threading
import time

import browser
from harness import TOP, Agent, HAProxy, Redis, wait_for


def kit_rules():
    """The [lease], [fallback] and [rule:*] sections of the kit's INI."""
    with open(os.path.join(TOP, "haproxy", "ratelimit.ini")) as f:
        text = f.read()
    return text[text.index("[lease]"):]


def traffic(haproxy, halt):
    clients = ["acme-prod", "globex", "initech", "hooli-batch", "umbrella"]
    n = 0
    while not halt.is_set():
        key = clients[n % len(clients)] if n % 7 else "scraper-%d" % (n % 3)
        path = "/login" if n % 11 == 0 else "/api/items"
        haproxy.request(path, headers={"X-API-Key": key})
        n += 1
        time.sleep(0.004 if n % 50 else 0.2)


def main(out, seconds):
    redis = Redis()
    agent = Agent("[redis]\nurl = redis://127.0.0.1:%d\n" % redis.port + kit_rules(), workers=2)
    haproxy = HAProxy(agent.port)
    halt = threading.Event()
    t = threading.Thread(target=traffic, args=(haproxy, halt), daemon=True)
    t.start()
    try:
        time.sleep(seconds)
        with browser.Browser() as b:
            page = b.open("http://127.0.0.1:%d/" % agent.stats_port)
            page.wait_for("Number(document.body.dataset.ticks || 0) >= 2")
            page.screenshot(out, width=1280, height=860)
    finally:
        halt.set()
        t.join(10)
        haproxy.stop()
        agent.stop()
        redis.stop()
    print("wrote", out)


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 60)
