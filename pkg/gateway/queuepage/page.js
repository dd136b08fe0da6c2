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

// said is what the buyer reads for an answer's error code: texts.js's
// words, never the server's sentence (it cannot be translated, and may
// name an API field).
function said(r) {
  return T.errors[r.body.error] || (r.status === 429 || r.status >= 500 ? T.retrying : T.errorUnknown);
}

// live are the statuses of an order the buyer holds.
const live = ["pending", "created", "paid", "completed", "entered", "won"];

// mine is the buyer's live orders of this voucher (pending ones
// included), or null when they cannot be read now.
async function mine() {
  const r = await call("GET", "/v1/orders?voucher_id=" + encodeURIComponent(voucher));
  if (r.status !== 200) return null;
  return (r.body.orders || []).filter((o) => live.includes(o.status));
}

// orderLine is what the buyer reads of order o: its id, and what to do
// next (pay before a time in the buyer's own time, or nothing).
function orderLine(o) {
  const id = o.order_id;
  switch (o.status) {
    case "pending": return fill(T.orderPending, {id});
    case "created": {
      const by = Date.parse(o.expires_at || "");
      return by ? fill(T.orderPayBy, {id, time: new Date(by).toLocaleString([], {dateStyle: "medium", timeStyle: "short"})})
        : fill(T.orderCreated, {id});
    }
    case "paid": case "completed": return fill(T.orderPaid, {id});
    default: return fill(T.orderHeld, {id});
  }
}

// showOrders shows the orders the buyer holds, and nothing to buy: the
// page's state is "bought" from here on. It follows a pending order until
// MySQL has it.
async function showOrders(orders) {
  $("buy").hidden = true;
  stopPass();
  $("figures").hidden = true;
  const name = card.dataset.name;
  $("title").textContent = name ? fill(T.titleBoughtNamed, {name}) : fill(T.titleBought, {id: voucher});
  document.title = $("title").textContent;
  say(T.thanks);
  const o = $("order");
  o.hidden = false;
  for (;;) {
    o.textContent = orders.map(orderLine).join(" ");
    if (!orders.some((x) => x.status === "pending")) return;
    await sleep(1000);
    orders = await Promise.all(orders.map(async (x) => {
      const s = await call("GET", "/v1/orders/" + encodeURIComponent(x.order_id));
      return s.status === 200 ? s.body : x;
    }));
  }
}

// solve finds the number an ALTCHA challenge hides: SHA-256(salt + n)
// equals challenge, n at most maxNumber. Returns the payload the gateway
// takes in X-Flashsale-Proof.
async function solve() {
  say(T.solving);
  const r = await call("GET", "/v1/challenge?voucher_id=" + encodeURIComponent(voucher));
  if (r.status !== 200) throw {said: said(r)};
  const c = r.body, enc = new TextEncoder();
  for (let n = 0; n <= c.maxNumber; n++) {
    const d = new Uint8Array(await crypto.subtle.digest("SHA-256", enc.encode(c.salt + n)));
    let hex = "";
    for (const b of d) hex += b.toString(16).padStart(2, "0");
    if (hex === c.challenge) {
      return btoa(JSON.stringify({algorithm: c.algorithm, challenge: c.challenge, number: n, salt: c.salt, signature: c.signature}));
    }
  }
  throw {said: T.errors.proof_invalid};
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

// untilOpen waits for the room to open: a countdown to the time the page
// was given (data-opens-at, the sale's start less its pre-queue, in the
// buyer's own time), then join asks again; without it, a few seconds.
async function untilOpen(retry) {
  const at = Number(card.dataset.opensAt || 0);
  if (!(at > Date.now())) { say(T.notStarted); await sleep(1000 * Math.max(retry, 2)); return; }
  const time = new Date(at).toLocaleString([], {dateStyle: "medium", timeStyle: "short"});
  while (Date.now() < at) {
    const s = Math.ceil((at - Date.now()) / 1000);
    const left = s >= 3600 ? Math.floor(s / 3600) + ":" + String(Math.floor(s % 3600 / 60)).padStart(2, "0") + ":" + String(s % 60).padStart(2, "0")
      : Math.floor(s / 60) + ":" + String(s % 60).padStart(2, "0");
    say(fill(T.opensAt, {time, left}));
    await sleep(Math.min(1000, at - Date.now()));
  }
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
    if (code === "not_started") { await untilOpen(r.retry); continue; }
    if (r.status === 429 || r.status === 503) { say(T.retrying); await sleep(1000 * r.retry); continue; }
    throw {said: said(r)};
  }
}

// placedAt: when this page first saw the buyer placed. The room gives no
// estimate until it has watched admissions for a second, nor while
// nobody is admitted (every unit held by those ahead, deciding): past the
// first seconds, the page says so rather than "estimating" for minutes.
let placedAt = 0;
const estimatingFor = 5000;

function showWait(a) {
  const waiting = a.state === "waiting" && a.position > 0;
  $("figures").hidden = !waiting;
  if (!waiting) return;
  placedAt = placedAt || Date.now();
  $("position").textContent = a.position;
  const eta = a.eta_ms;
  $("eta").textContent = eta == null ? (Date.now() - placedAt < estimatingFor ? T.etaUnknown : T.etaHeld)
    : eta < 90000 ? fill(T.seconds, {n: Math.max(1, Math.round(eta / 1000))}) : fill(T.minutes, {n: Math.round(eta / 60000)});
}

// pressKey is the Idempotency-Key of the buyer's press of Buy, kept until
// its outcome is known: sent again, it is the same claim, never a second
// order.
let pressKey = "";
function newKey() {
  const b = crypto.getRandomValues(new Uint8Array(12));
  return "page-" + Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

// claim sends the press's claim; a lost connection is status 0.
async function claim() {
  const h = {"Idempotency-Key": pressKey};
  if (queueToken) h["X-Flashsale-Queue"] = queueToken;
  try {
    return await call("POST", "/v1/vouchers/" + encodeURIComponent(voucher) + "/orders", h);
  } catch (e) {
    return {status: 0, body: {}, retry: 1};
  }
}

// settle finds out what became of a claim answered r, whose outcome may
// be unknown (a 503 of any code, no answer), showing "checking your
// order…" and no Buy until it knows: an outcome_unknown is asked by its
// claim_id, no answer by sending the same press again (its key makes it
// the same claim), a 503 unavailable by the buyer's orders. It returns the
// orders the buyer holds, or null: nothing was taken (r is then the
// answer to show).
let checking = false; // settle is finding out: the room's answers are not shown meanwhile
async function settle(r) {
  checking = true;
  try { return await settleLoop(r); } finally { checking = false; }
}
async function settleLoop(r) {
  const b = $("buy");
  b.disabled = true;
  say(T.checking);
  for (let wait = 1000; ; wait = Math.min(2 * wait, 8000)) {
    if (r.status === 202) return [{order_id: r.body.order_id, status: r.body.status}];
    if (r.status === 503 && r.body.error === "outcome_unknown" && r.body.claim_id) {
      const o = await call("GET", "/v1/vouchers/" + encodeURIComponent(voucher) + "/claims/" + encodeURIComponent(r.body.claim_id)).catch(() => null);
      if (o && o.status === 200 && o.body.status === "admitted") return [{order_id: o.body.order_id, status: "pending"}];
      if (o && o.status === 200 && o.body.status === "refused") return null;
    } else if (r.status === 0) {
      r = await claim();
      if (r.status !== 0 && r.status < 500) return r.status === 202 ? [{order_id: r.body.order_id, status: r.body.status}] : null;
      if (r.status !== 0) continue; // a 503: decided below
    } else {
      const held = await mine().catch(() => null);
      if (held) return held.length > 0 ? held : null;
    }
    await sleep(Math.max(wait, 1000 * (r.retry || 1)));
  }
}

async function buy() {
  const b = $("buy");
  b.disabled = true;
  say(T.buying);
  pressKey = pressKey || newKey();
  let r = await claim();
  if (r.status === 0 || r.status >= 500) {
    const held = await settle(r);
    if (held && held.length > 0) { pressKey = ""; await showOrders(held); return; }
  }
  if (r.status === 202) { pressKey = ""; await showOrders([{order_id: r.body.order_id, status: r.body.status}]); return; }
  pressKey = "";
  // A limit reached: what the buyer holds says what to show.
  if (r.body.error === "user_limit") {
    const held = await mine();
    if (held && held.length > 0) { await showOrders(held); return; }
  }
  b.disabled = false;
  if (r.body.error === "sold_out" || r.body.error === "user_limit") b.hidden = true;
  say(said(r));
}

// The admitted buyer's pass: a countdown to pass_expires_at.
let passTimer = 0;
let passEnds = 0; // the pass's end, unix ms (0: none)
function showPass(expiresAt) {
  const p = $("pass");
  const end = Date.parse(expiresAt || "");
  if (!$("order").hidden) return; // bought: no turn to count down
  passEnds = end || passEnds;
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
    if (checking) { await sleep(500); continue; } // one thing at a time: the claim's outcome first
    if (!$("order").hidden) return; // bought while a poll was out: its answer (sold out, say) is not this buyer's news
    showWait(a);
    switch (a.state) {
      case "admitted": {
        if ($("order").hidden) say(T.admitted);
        showPass(a.pass_expires_at);
        const b = $("buy");
        if (b.hidden && $("order").hidden && !b.disabled) { b.hidden = false; b.focus(); }
        break;
      }
      case "sold_out": say(T.soldOut); $("buy").hidden = true; stopPass(); break;
      case "closed": say(T.closed); $("buy").hidden = true; stopPass(); return;
      case "lapsed": say(T.lapsed); $("buy").hidden = true; stopPass(); return;
      case "paused": // no Buy while paused, and no countdown: a pause does not extend the turn
        $("buy").hidden = true;
        stopPass();
        say(passEnds ? fill(T.pausedAdmitted, {time: new Date(passEnds).toLocaleTimeString([], {timeStyle: "short"})}) : T.paused);
        break;
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
  if (voucher === "0") { // the link's id is no voucher id: nothing to ask
    $("title").textContent = document.title = T.noSuchSale;
    say(T.errors.voucher_not_found);
    return;
  }
  $("access-submit").textContent = T.accessSubmit;
  $("buy").textContent = T.buy;
  $("buy").onclick = () => buy().catch(() => say(T.retrying));
  readFragment();
  if (!token) {
    say(T.noToken);
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
  // A buyer who bought already is shown the order, not a turn to buy.
  const held = await mine();
  if (held && held.length > 0) { await showOrders(held); return; }
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

start().catch((e) => say((e && e.said) || T.errorUnknown));
