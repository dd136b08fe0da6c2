// The queue page: join a voucher's waiting room, solve its proof of work
// when it has a gate, wait (position, estimate, state), and buy once
// admitted. It talks to the gateway that served it and nothing else; the
// buyer's token comes from the URL fragment (#token=…, never sent to any
// server) or from the page that embeds it (postMessage, from an origin
// FLASHSALE_QUEUE_EMBED_ORIGINS allows), and is sent only to this gateway.
"use strict";

const T = window.QUEUE_TEXTS;
const $ = (id) => document.getElementById(id);
const card = $("card");
const voucher = card.dataset.voucher;
const fill = (s, vars) => s.replace(/\{(\w+)\}/g, (_, k) => (k in vars ? vars[k] : "{" + k + "}"));

let token = "", access = "", queueToken = "";

function say(text) { $("status").textContent = text; }

function readFragment() {
  const f = new URLSearchParams(location.hash.slice(1));
  if (f.get("token")) token = f.get("token");
  if (f.get("access")) access = f.get("access");
  // The token leaves the address bar (and the history) at once.
  if (location.hash) history.replaceState(null, "", location.pathname + location.search);
}

function headers(extra) {
  const h = Object.assign({}, extra);
  if (token) h.Authorization = "Bearer " + token;
  if (access) h["X-Flashsale-Access"] = access;
  return h;
}

async function call(method, path, extra) {
  const res = await fetch(path, {method, headers: headers(extra), cache: "no-store", credentials: "omit"});
  let body = {};
  try { body = await res.json(); } catch (e) { /* not JSON: an error page of a proxy */ }
  return {status: res.status, body, retry: Number(res.headers.get("Retry-After") || 1)};
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// solve finds the number an ALTCHA challenge hides: SHA-256(salt + n)
// equals challenge, n at most maxNumber. Returns the payload the gateway
// takes in X-Flashsale-Proof.
async function solve() {
  say(T.solving);
  const r = await call("GET", "/v1/challenge?voucher_id=" + encodeURIComponent(voucher));
  if (r.status !== 200) throw new Error(r.body.message || "challenge " + r.status);
  const c = r.body, enc = new TextEncoder();
  for (let n = 0; n <= c.maxNumber; n++) {
    const d = new Uint8Array(await crypto.subtle.digest("SHA-256", enc.encode(c.salt + n)));
    let hex = "";
    for (const b of d) hex += b.toString(16).padStart(2, "0");
    if (hex === c.challenge) {
      return btoa(JSON.stringify({algorithm: c.algorithm, challenge: c.challenge, number: n, salt: c.salt, signature: c.signature}));
    }
  }
  throw new Error("challenge not solved");
}

function askAccess(wrong) {
  return new Promise((resolve) => {
    say(wrong ? T.accessWrong : T.accessNeeded);
    const form = $("access-form");
    form.hidden = false;
    $("access-code").focus();
    form.onsubmit = (e) => {
      e.preventDefault();
      access = $("access-code").value.trim();
      form.hidden = true;
      resolve();
    };
  });
}

// join takes a place, asking for what the room's door wants.
async function join() {
  let proof = "";
  for (;;) {
    say(T.joining);
    const r = await call("POST", "/v1/vouchers/" + encodeURIComponent(voucher) + "/queue", proof ? {"X-Flashsale-Proof": proof} : {});
    const code = r.body.error;
    if (r.status === 200) return r.body;
    if (code === "proof_required" || code === "proof_invalid") { proof = await solve(); continue; }
    if (code === "access_required" || code === "access_invalid") { await askAccess(code === "access_invalid"); continue; }
    if (code === "no_waiting_room") return null;
    if (r.status === 429 || r.status === 503) { say(T.retrying); await sleep(1000 * r.retry); continue; }
    throw new Error(r.body.message || "HTTP " + r.status);
  }
}

function showWait(a) {
  const waiting = a.state === "waiting" && a.position > 0;
  $("figures").hidden = !waiting;
  if (!waiting) return;
  $("position").textContent = a.position;
  const eta = a.eta_ms;
  $("eta").textContent = eta == null ? T.etaUnknown
    : eta < 90000 ? fill(T.seconds, {n: Math.max(1, Math.round(eta / 1000))}) : fill(T.minutes, {n: Math.round(eta / 60000)});
}

async function buy() {
  const b = $("buy");
  b.disabled = true;
  say(T.buying);
  const r = await call("POST", "/v1/vouchers/" + encodeURIComponent(voucher) + "/orders", queueToken ? {"X-Flashsale-Queue": queueToken} : {});
  if (r.status !== 202) {
    b.disabled = false;
    if (r.body.error === "sold_out") { b.hidden = true; say(T.soldOut); return; }
    say(fill(T.failed, {s: r.body.message || "HTTP " + r.status}));
    return;
  }
  b.hidden = true;
  stopPass();
  const id = r.body.order_id;
  const o = $("order");
  o.hidden = false;
  say(T.thanks); // the order line says the rest, once
  for (let status = r.body.status; ; ) {
    o.textContent = fill(T.bought, {id, status});
    if (status !== "pending") return;
    await sleep(1000);
    const s = await call("GET", "/v1/orders/" + encodeURIComponent(id));
    if (s.status === 200) status = s.body.status;
  }
}

// The admitted buyer's pass: a countdown to pass_expires_at.
let passTimer = 0;
function showPass(expiresAt) {
  const p = $("pass");
  const end = Date.parse(expiresAt || "");
  if (!end || passTimer) return;
  const tick = () => {
    const left = Math.max(0, Math.round((end - Date.now()) / 1000));
    p.textContent = fill(T.passLeft, {s: Math.floor(left / 60) + ":" + String(left % 60).padStart(2, "0")});
    p.hidden = false;
  };
  tick();
  passTimer = setInterval(tick, 1000);
}
function stopPass() {
  clearInterval(passTimer);
  passTimer = 0;
  $("pass").hidden = true;
}

// wait polls the room as its answers say, until the buyer's turn or the end.
async function wait(a) {
  for (;;) {
    showWait(a);
    switch (a.state) {
      case "admitted": {
        if ($("order").hidden) say(T.admitted);
        showPass(a.pass_expires_at);
        const b = $("buy");
        if (b.hidden && $("order").hidden) { b.hidden = false; b.focus(); }
        break;
      }
      case "sold_out": say(T.soldOut); $("buy").hidden = true; stopPass(); break;
      case "closed": say(T.closed); $("buy").hidden = true; stopPass(); return;
      case "lapsed": say(T.lapsed); $("buy").hidden = true; stopPass(); return;
      case "paused": say(T.paused); break;
      default: say(a.position > 0 ? T.waiting : T.waitingStart);
    }
    if (!$("order").hidden) return;
    await sleep(Math.max(a.retry_after_ms || 1000, 300));
    const r = await call("GET", "/v1/vouchers/" + encodeURIComponent(voucher) + "/queue", {"X-Flashsale-Queue": queueToken});
    if (r.status === 200) { a = r.body; continue; }
    say(T.retrying);
    await sleep(1000 * r.retry);
  }
}

async function start() {
  const name = card.dataset.name;
  $("title").textContent = name ? fill(T.titleNamed, {name}) : fill(T.title, {id: voucher});
  document.title = $("title").textContent;
  $("position-label").textContent = T.positionLabel;
  $("eta-label").textContent = T.etaLabel;
  $("access-label").textContent = T.accessLabel;
  $("access-submit").textContent = T.accessSubmit;
  $("buy").textContent = T.buy;
  $("buy").onclick = () => buy().catch((e) => say(fill(T.failed, {s: e.message})));
  readFragment();
  if (!token) {
    say(fill(T.noToken, {id: voucher}));
    const allowed = (document.documentElement.dataset.embedOrigins || "").split(" ").filter(Boolean);
    await new Promise((resolve) => {
      window.addEventListener("message", (e) => {
        if (!allowed.includes(e.origin) || !e.data || e.data.type !== "flashsale-token" || typeof e.data.token !== "string") return;
        token = e.data.token;
        if (typeof e.data.access === "string") access = e.data.access;
        resolve();
      });
    });
  }
  const a = await join();
  if (!a) { // no room: the buyer claims directly
    say(T.noRoom);
    $("buy").hidden = false;
    $("buy").focus();
    return;
  }
  queueToken = a.queue_token;
  await wait(a);
}

start().catch((e) => say(fill(T.failed, {s: e.message})));
