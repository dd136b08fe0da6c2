// The queue page: join a voucher's waiting room, solve its proof of work
// when it has a gate, wait (position, estimate, state), and buy once
// admitted. It talks to the gateway that served it and nothing else; the
// buyer's token comes from the URL fragment (#token=…, never sent to any
// server) or from the page that embeds it (postMessage, from an origin
// FLASHSALE_QUEUE_EMBED_ORIGINS allows), and is sent only to this gateway.
// What the page knows of the buyer (the token, the queue token, a press
// whose outcome is not known yet, the turn's end) is kept in this tab's
// sessionStorage, so a reload returns to the same state (SECURITY.md).
"use strict";

const T = window.QUEUE_TEXTS;
const $ = (id) => document.getElementById(id);
const card = $("card");
const voucher = card.dataset.voucher;
const fill = (s, vars) => s.replace(/\{(\w+)\}/g, (_, k) => (k in vars ? vars[k] : "{" + k + "}"));

let token = "", access = "", queueToken = "";

function say(text) { $("status").textContent = text; }

// memory is this tab's record of the buyer on this voucher's page, in
// sessionStorage (none where the browser refuses it): the page reloaded
// or reopened in the tab picks up where it was.
const memoryKey = "flashsale-queue:" + voucher;
const memory = (() => {
  try { return JSON.parse(sessionStorage.getItem(memoryKey) || "{}") || {}; } catch (e) { return {}; }
})();
function remember(fields) {
  Object.assign(memory, fields);
  try { sessionStorage.setItem(memoryKey, JSON.stringify(memory)); } catch (e) { /* private mode: only a reload forgets */ }
}

function readFragment() {
  const f = new URLSearchParams(location.hash.slice(1));
  if (f.get("token") && f.get("token") !== memory.token) {
    // A new link: another buyer, or a new sign-in. What the page knew
    // of the old one is not this one's.
    for (const k of Object.keys(memory)) delete memory[k];
    remember({token: f.get("token")});
  }
  if (f.get("access")) remember({access: f.get("access")});
  // The shop that sent the buyer here, kept for the way back once bought
  // (its origin only: the referrer's path may carry the buyer's state).
  if (!memory.shop && document.referrer) {
    const from = new URL(document.referrer);
    if (from.origin !== location.origin && /^https?:$/.test(from.protocol)) remember({shop: from.origin + "/"});
  }
  token = memory.token || "";
  access = memory.access || "";
  queueToken = memory.queue || "";
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
  if (res.status === 401 && token) remember({token: ""}); // expired: the shop signs the buyer in again
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
  if (memory.shop) {
    $("back-link").href = memory.shop;
    $("back-link").textContent = T.backToShop;
    $("back").hidden = false;
  }
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

// The buyer's press of Buy, until its outcome is known: its
// Idempotency-Key (sent again, it is the same claim, never a second
// order) and, once answered outcome_unknown, its claim_id. Both are kept
// in memory: a reload while they are out goes on finding the outcome.
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

// ordering: from the press of Buy until its outcome is known, the page is
// in one state, "Placing/Checking your order…", with no Buy to press;
// the room's answers are not shown meanwhile (they would say "your turn",
// or "passed", of a turn being used). Past longFor it says the check may
// take a minute and the page must stay open.
let ordering = false, orderingSince = 0;
const longFor = 5000;
function placing(text) {
  if (!ordering) orderingSince = Date.now();
  ordering = true;
  $("buy").hidden = true;
  stopPass();
  $("figures").hidden = true;
  $("busy").hidden = false;
  say(text);
}
function placed() {
  ordering = false;
  $("busy").hidden = true;
  pressKey = "";
  remember({press: "", claim: ""});
}

// settle finds out what became of a claim answered r, whose outcome may
// be unknown (a 503 of any code, no answer): an outcome_unknown is asked
// by its claim_id, no answer by sending the same press again (its key
// makes it the same claim), a 503 unavailable by the buyer's orders;
// once a second, so the outcome shows within a second or two of the
// gateway answering again. It returns the orders the buyer holds, or the
// answer of a claim that took nothing.
async function settle(r) {
  placing(T.checking);
  for (;;) {
    if (r.status === 202) return {orders: [{order_id: r.body.order_id, status: r.body.status}]};
    if (r.status === 503 && r.body.error === "outcome_unknown" && r.body.claim_id) {
      remember({claim: r.body.claim_id});
      const o = await call("GET", "/v1/vouchers/" + encodeURIComponent(voucher) + "/claims/" + encodeURIComponent(r.body.claim_id)).catch(() => null);
      if (o && o.status === 200 && o.body.status === "admitted") return {orders: [{order_id: o.body.order_id, status: "pending"}]};
      if (o && o.status === 200 && o.body.status === "refused") return {answer: {status: 409, body: {error: o.body.error}}};
    } else if (r.status === 0) {
      r = await claim();
      if (r.status !== 0 && r.status < 500) return r.status === 202 ? {orders: [{order_id: r.body.order_id, status: r.body.status}]} : {answer: r};
      if (r.status !== 0) continue; // a 503: decided below
    } else {
      const held = await mine().catch(() => null);
      if (held) return held.length > 0 ? {orders: held} : {answer: r};
    }
    if (Date.now() - orderingSince >= longFor) say(T.checkingLong);
    await sleep(1000);
  }
}

async function buy() {
  placing(T.buying);
  pressKey = pressKey || newKey();
  remember({press: pressKey});
  await decide(await claim());
}

// decide shows the outcome of the press answered r: the order, or what
// refused it, with Buy again where buying still can succeed.
async function decide(r) {
  if (r.status === 0 || r.status >= 500) {
    const s = await settle(r);
    if (s.orders) { placed(); await showOrders(s.orders); return; }
    r = s.answer;
  }
  if (r.status === 202) { placed(); await showOrders([{order_id: r.body.order_id, status: r.body.status}]); return; }
  // A limit reached: what the buyer holds says what to show.
  if (r.body.error === "user_limit") {
    const held = await mine();
    if (held && held.length > 0) { placed(); await showOrders(held); return; }
  }
  placed();
  $("buy").hidden = r.body.error === "sold_out" || r.body.error === "user_limit";
  say(said(r));
}

// The admitted buyer's pass: a countdown to pass_expires_at.
let passTimer = 0;
let passEnds = 0; // the pass's end, unix ms (0: none)
function showPass(expiresAt) {
  const p = $("pass");
  const end = Date.parse(expiresAt || "");
  if (!$("order").hidden || ordering) return; // bought, or buying: no turn to count down
  passEnds = end || passEnds;
  if (end) remember({passEnds: end});
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
    if (ordering) { await sleep(500); continue; } // one thing at a time: the press's outcome first
    if (!$("order").hidden) return; // bought while a poll was out: its answer (sold out, say) is not this buyer's news
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
      case "paused": // no Buy while paused, and no countdown: a pause does not extend the turn
        $("buy").hidden = true;
        stopPass();
        say(passEnds ? fill(T.pausedAdmitted, {time: new Date(passEnds).toLocaleTimeString([], {timeStyle: "short"})}) : T.paused);
        break;
      default: say(a.position > 0 ? T.waiting : T.waitingStart);
    }
    if (!$("order").hidden) return;
    await sleep(Math.max(a.retry_after_ms || 1000, 300));
    const r = await poll();
    if (r.status === 200) { a = r.body; continue; }
    if (!ordering) say(T.retrying);
    await sleep(1000 * r.retry);
  }
}

// poll asks the room for the buyer's state by the queue token.
function poll() {
  return call("GET", "/v1/vouchers/" + encodeURIComponent(voucher) + "/queue", {"X-Flashsale-Queue": queueToken})
    .catch(() => ({status: 0, body: {}, retry: 1}));
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
  $("buy").onclick = () => buy().catch(() => { placed(); $("buy").hidden = false; say(T.retrying); });
  $("busy-text").textContent = T.busy;
  readFragment();
  if (!token) {
    say(T.noToken);
    const allowed = (document.documentElement.dataset.embedOrigins || "").split(" ").filter(Boolean);
    await new Promise((resolve) => {
      window.addEventListener("message", (e) => {
        if (!allowed.includes(e.origin) || !e.data || e.data.type !== "flashsale-token" || typeof e.data.token !== "string") return;
        token = e.data.token;
        if (typeof e.data.access === "string") access = e.data.access;
        remember({token, access});
        resolve();
      });
    });
  }
  passEnds = memory.passEnds || 0;
  // A press whose outcome the page had not learned before it was
  // reloaded: found out first, showing "Checking your order…".
  if (memory.press) {
    pressKey = memory.press;
    await decide(memory.claim ? {status: 503, body: {error: "outcome_unknown", claim_id: memory.claim}} : {status: 0, body: {}});
    if (!$("order").hidden) return;
  }
  // A buyer who bought already is shown the order, not a turn to buy.
  const held = await mine();
  if (held && held.length > 0) { await showOrders(held); return; }
  // A place taken before a reload is asked about by its queue token (no
  // second join, no second proof of work).
  let a = null;
  if (queueToken) {
    const r = await poll();
    if (r.status === 200) a = r.body;
  }
  a = a || await join();
  if (!a) { // no room: the buyer claims directly
    $("title").textContent = document.title = card.dataset.name ? fill(T.titleSaleNamed, {name: card.dataset.name}) : fill(T.titleSale, {id: voucher});
    say(T.noRoom);
    $("buy").hidden = false;
    $("buy").focus();
    return;
  }
  queueToken = a.queue_token;
  remember({queue: queueToken});
  await wait(a);
}

start().catch((e) => say((e && e.said) || T.errorUnknown));
