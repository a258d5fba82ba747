// The shop page's script: lists the vouchers with their stock and sale window (refreshed
// every second), logs a buyer in by phone, buys, shows the buyer's own orders and a live
// view of the sale. It uses the service's public routes only, on the origin that served
// the page, and never puts a value from the service into the page as HTML (text only).
'use strict';

/** How often the listing and the live view refresh. */
const POLL_MS = 1000;
/** How far back the orders/s figure looks. */
const RATE_WINDOW_MS = 5000;
/** How far back the live chart goes. */
const CHART_MS = 60000;
/** Where the login is kept: this tab only, gone when it closes. */
const SESSION_KEY = 'seckill.session';

/** Words for the service's refusal codes (any other code is shown as it is). */
const REASONS = {
  SOLD_OUT: 'Sold out',
  ALREADY_ORDERED: 'Already ordered',
  NOT_STARTED: 'Not started',
  ENDED: 'Ended',
  RATE_LIMITED: 'Too many attempts',
  LOCK_LOST: 'Lock expired, retry',
  UNAUTHORIZED: 'Not logged in',
  UNAVAILABLE: 'Service unavailable',
  VOUCHER_NOT_FOUND: 'No such voucher',
};

const shop = {
  session: readSession(),
  /** Voucher id → the voucher as the last listing showed it. */
  vouchers: new Map(),
  /** Voucher id → its card's elements. */
  cards: new Map(),
  /** The service's clock minus this one's: sale windows are judged by the service's. */
  clockOffsetMs: 0,
  /** Voucher id → this buyer's orders of it. */
  orders: new Map(),
  /** Samples of the service's order counter: { at (ms), ordered }. */
  samples: [],
  /** Listings asked for, and the latest one shown: an older reply never overwrites a newer. */
  listingsAsked: 0,
  listingShown: 0,
};

const byId = (id) => document.getElementById(id);

function element(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined) e.textContent = text;
  return e;
}

function readSession() {
  try {
    const saved = JSON.parse(sessionStorage.getItem(SESSION_KEY) || 'null');
    return saved && typeof saved.token === 'string' ? saved : null;
  } catch {
    return null;
  }
}

function saveSession(session) {
  try {
    if (session) sessionStorage.setItem(SESSION_KEY, JSON.stringify(session));
    else sessionStorage.removeItem(SESSION_KEY);
  } catch {
    // Storage off: the login lasts until the page reloads.
  }
}

/**
 * One call to the service. Resolves to { ok, status, data } or, for a refusal,
 * { ok: false, status, code, message } with the service's code and message; never
 * rejects (a network failure is { code: 'NETWORK' }).
 */
async function api(method, path, { body, auth = false, text = false } = {}) {
  const headers = { Accept: text ? 'text/plain' : 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (auth && shop.session) headers.Authorization = `Bearer ${shop.session.token}`;
  let reply;
  try {
    reply = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: 'no-store',
      credentials: 'omit',
    });
  } catch {
    return { ok: false, status: 0, code: 'NETWORK', message: 'The shop cannot be reached.' };
  }
  let data = null;
  try {
    data = text ? await reply.text() : await reply.json();
  } catch {
    data = null;
  }
  if (reply.ok) return { ok: true, status: reply.status, data };
  return {
    ok: false,
    status: reply.status,
    code: (data && data.code) || `HTTP_${reply.status}`,
    message: (data && data.message) || reply.statusText || `HTTP ${reply.status}`,
  };
}

function say(target, text, kind, code) {
  target.textContent = text;
  target.classList.toggle('ok', kind === 'ok');
  target.classList.toggle('refused', kind === 'refused');
  if (code) target.dataset.code = code;
  else delete target.dataset.code;
}

/** "3m 20s", "2h 5m", "4d 1h": the two largest units. */
function duration(ms) {
  let s = Math.max(0, Math.round(ms / 1000));
  const units = [['d', 86400], ['h', 3600], ['m', 60], ['s', 1]];
  const parts = [];
  for (const [name, size] of units) {
    if (s >= size || (name === 's' && parts.length === 0)) {
      parts.push(`${Math.floor(s / size)}${name}`);
      s %= size;
    }
    if (parts.length === 2) break;
  }
  return parts.join(' ');
}

const timeFormat = new Intl.DateTimeFormat(undefined, {
  month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit',
});

function when(iso) {
  const t = Date.parse(iso);
  return Number.isNaN(t) ? iso : timeFormat.format(new Date(t));
}

/** Where a voucher's sale stands at `now` (the service's clock). */
function phase(voucher, now) {
  if (now < Date.parse(voucher.begin_time)) return 'upcoming';
  if (now > Date.parse(voucher.end_time)) return 'ended';
  if (voucher.stock <= 0) return 'sold-out';
  return 'on-sale';
}

// ---- Vouchers ----

function newCard(id) {
  const li = element('li', 'voucher');
  li.id = `voucher-${id}`;
  li.dataset.voucherId = id;
  const card = {
    li,
    title: element('h3', 'title'),
    state: element('span', 'badge state'),
    stock: element('span', 'stock'),
    window: element('p', 'window'),
    buy: element('button', 'buy', 'Buy'),
    owned: element('span', 'owned', '✓ In your orders'),
    message: element('p', 'message'),
    busy: false,
  };
  const stockLine = element('p', 'stock-line');
  stockLine.append(card.stock, element('span', 'unit', 'left'));
  const actions = element('div', 'actions');
  card.buy.type = 'button';
  card.owned.hidden = true;
  card.message.setAttribute('role', 'status');
  card.message.setAttribute('aria-live', 'polite');
  actions.append(card.buy, card.owned);
  li.append(card.title, card.state, stockLine, card.window, actions, card.message);
  card.buy.addEventListener('click', () => purchase(id));
  return card;
}

function renderVoucher(card, voucher, now) {
  const p = phase(voucher, now);
  card.li.dataset.phase = p;
  card.li.classList.toggle('sold-out', p === 'sold-out');
  card.title.textContent = voucher.title;
  card.stock.textContent = String(voucher.stock);
  card.window.textContent = `Sale ${when(voucher.begin_time)} – ${when(voucher.end_time)}`;
  card.state.className = `badge state ${p}`;
  card.state.textContent = {
    upcoming: `Starts in ${duration(Date.parse(voucher.begin_time) - now)}`,
    'on-sale': `On sale · ends in ${duration(Date.parse(voucher.end_time) - now)}`,
    'sold-out': 'Sold out',
    ended: 'Ended',
  }[p];
  const mine = (shop.orders.get(voucher.id) || []).length > 0;
  card.owned.hidden = !mine;
  if (card.busy) {
    card.buy.disabled = true;
    card.buy.textContent = 'Buying…';
  } else if (p !== 'on-sale') {
    card.buy.disabled = true;
    card.buy.textContent = { upcoming: 'Not started', 'sold-out': 'Sold out', ended: 'Ended' }[p];
  } else if (!shop.session) {
    card.buy.disabled = true;
    card.buy.textContent = 'Log in to buy';
  } else {
    // Enabled even after this buyer's order: the service, not the page, decides, and
    // its refusal is shown.
    card.buy.disabled = false;
    card.buy.textContent = 'Buy';
  }
  // Every card's button says "Buy": a screen reader hears which voucher it buys.
  card.buy.setAttribute('aria-label', `${card.buy.textContent}: ${voucher.title}`);
}

function renderVouchers() {
  const now = Date.now() + shop.clockOffsetMs;
  const list = byId('voucher-list');
  for (const [id, card] of shop.cards) {
    if (!shop.vouchers.has(id)) {
      card.li.remove();
      shop.cards.delete(id);
    }
  }
  let previous = null;
  for (const [id, voucher] of shop.vouchers) {
    let card = shop.cards.get(id);
    if (!card) {
      card = newCard(id);
      shop.cards.set(id, card);
    }
    // In the listing's order (newest first), moving only what is out of place.
    const expected = previous ? previous.nextSibling : list.firstChild;
    if (expected !== card.li) list.insertBefore(card.li, expected);
    previous = card.li;
    renderVoucher(card, voucher, now);
  }
  let onSale = 0;
  for (const voucher of shop.vouchers.values()) {
    const p = phase(voucher, now);
    if (p === 'on-sale' || p === 'sold-out') onSale += voucher.stock;
  }
  byId('live-stock').textContent = String(onSale);
}

async function refreshVouchers() {
  const status = byId('vouchers-status');
  shop.listingsAsked += 1;
  const asked = shop.listingsAsked;
  const reply = await api('GET', '/vouchers');
  if (asked < shop.listingShown) return;
  shop.listingShown = asked;
  if (!reply.ok || !reply.data || !Array.isArray(reply.data.vouchers)) {
    say(status, `The vouchers cannot be loaded: ${reply.message || 'unexpected reply'}`, 'refused');
    status.hidden = false;
    return;
  }
  const serverNow = Date.parse(reply.data.server_time);
  if (!Number.isNaN(serverNow)) shop.clockOffsetMs = serverNow - Date.now();
  shop.vouchers = new Map(reply.data.vouchers.map((v) => [v.id, v]));
  say(status, shop.vouchers.size === 0 ? 'No vouchers yet.' : '');
  status.hidden = shop.vouchers.size > 0;
  renderVouchers();
}

async function purchase(id) {
  const card = shop.cards.get(id);
  if (!card || !shop.session) return;
  card.busy = true;
  say(card.message, 'Placing your order…');
  renderVouchers();
  const reply = await api('POST', `/vouchers/${encodeURIComponent(id)}/seckill`, { auth: true });
  card.busy = false;
  if (reply.ok) {
    say(card.message, `Ordered. Order ${reply.data.order_id}.`, 'ok', 'ORDERED');
  } else {
    const reason = REASONS[reply.code] || reply.code;
    say(card.message, `Not bought (${reason}): ${reply.message}`, 'refused', reply.code);
    if (reply.code === 'UNAUTHORIZED') logOut('Your login has expired: log in again.');
  }
  await Promise.all([refreshVouchers(), refreshOrders([id])]);
}

// ---- Login and the buyer's orders ----

function renderSession() {
  const session = shop.session;
  byId('login').hidden = Boolean(session);
  byId('session').hidden = !session;
  byId('session-phone').textContent = session ? session.phone : '';
  renderOrders();
  renderVouchers();
}

async function logIn(event) {
  event.preventDefault();
  const phone = byId('phone').value.trim();
  const message = byId('login-message');
  const button = byId('login-button');
  button.disabled = true;
  say(message, 'Logging in…');
  const reply = await api('POST', '/users/login', { body: { phone } });
  button.disabled = false;
  if (!reply.ok) {
    say(message, `Not logged in: ${reply.message}`, 'refused', reply.code);
    return;
  }
  shop.session = { token: reply.data.token, user_id: reply.data.user_id, phone };
  saveSession(shop.session);
  shop.orders = new Map();
  say(message, '');
  renderSession();
  await refreshOrders([...shop.vouchers.keys()]);
}

function logOut(why) {
  shop.session = null;
  shop.orders = new Map();
  saveSession(null);
  say(byId('login-message'), why || '', why ? 'refused' : undefined);
  renderSession();
}

/**
 * Reads this buyer's orders of the given vouchers through the API's own-orders view,
 * `GET /vouchers/{id}/orders` with the buyer's token, and keeps only the buyer's own
 * (whether or not the service already limits the reply to the caller's orders).
 */
async function refreshOrders(ids) {
  for (const id of ids) {
    if (!shop.session) return;
    const reply = await api('GET', `/vouchers/${encodeURIComponent(id)}/orders`, { auth: true });
    if (reply.ok && reply.data && Array.isArray(reply.data.orders)) {
      const me = shop.session.user_id;
      shop.orders.set(id, reply.data.orders.filter((o) => o.user_id === me));
    } else if (reply.code === 'UNAUTHORIZED') {
      logOut('Your login has expired: log in again.');
      return;
    } else {
      say(byId('orders-hint'), `Your orders cannot be read now: ${reply.message}`, 'refused');
      byId('orders-hint').hidden = false;
      return;
    }
  }
  renderOrders();
  renderVouchers();
}

function renderOrders() {
  const table = byId('my-orders');
  const hint = byId('orders-hint');
  const body = table.tBodies[0];
  const orders = [...shop.orders.values()].flat()
    .sort((a, b) => Date.parse(b.created_at) - Date.parse(a.created_at));
  body.replaceChildren(...orders.map((order) => {
    const row = element('tr');
    row.dataset.orderId = order.id;
    const voucher = shop.vouchers.get(order.voucher_id);
    row.append(
      element('td', 'voucher-title', voucher ? voucher.title : `Voucher ${order.voucher_id}`),
      element('td', 'order-id', order.id),
      element('td', 'placed', when(order.created_at)),
    );
    return row;
  }));
  table.hidden = orders.length === 0;
  hint.hidden = orders.length > 0;
  say(hint, shop.session ? 'No orders yet.' : 'Log in to see your orders.');
}

// ---- The live view ----
//
// From the service's /metrics: `seckill_purchases_total{outcome=...}` counts every
// answer to a purchase on this instance (ORDERED, or the refusal's code), so orders/s
// is that counter's growth over the last few seconds. The same numbers a Prometheus
// scrapes, no route of its own; the stock comes from the listing (the database).

function purchaseCounts(text) {
  const counts = {};
  for (const line of text.split('\n')) {
    if (!line.startsWith('seckill_purchases_total{')) continue;
    const match = /outcome="([^"]*)"[^}]*\}\s+(\S+)/.exec(line);
    if (match) counts[match[1]] = (counts[match[1]] || 0) + Number(match[2]);
  }
  return counts;
}

function renderLive(counts) {
  const now = performance.now();
  const ordered = counts.ORDERED || 0;
  const last = shop.samples[shop.samples.length - 1];
  if (last && ordered < last.ordered) shop.samples = []; // the instance restarted
  shop.samples.push({ at: now, ordered });
  shop.samples = shop.samples.filter((s) => now - s.at <= CHART_MS + POLL_MS);

  const base = shop.samples.find((s) => now - s.at <= RATE_WINDOW_MS) || shop.samples[0];
  const seconds = (now - base.at) / 1000;
  byId('live-rate').textContent = seconds > 0 ? ((ordered - base.ordered) / seconds).toFixed(1) : '0.0';
  byId('live-ordered').textContent = String(ordered);

  // Orders/s between consecutive samples, over the last minute (or since the page
  // opened, at least ten seconds: the line spans the chart from the start).
  const span = Math.min(CHART_MS, Math.max(now - shop.samples[0].at, 10 * POLL_MS));
  const rates = [];
  for (let i = 1; i < shop.samples.length; i += 1) {
    const [a, b] = [shop.samples[i - 1], shop.samples[i]];
    rates.push({ at: b.at, rate: (b.ordered - a.ordered) / Math.max((b.at - a.at) / 1000, 0.001) });
  }
  const top = Math.max(1, ...rates.map((r) => r.rate));
  byId('live-line').setAttribute('points', rates.map((r) => {
    const x = 240 - ((now - r.at) / span) * 240;
    const y = 46 - (r.rate / top) * 44;
    return `${x.toFixed(1)},${y.toFixed(1)}`;
  }).join(' '));

  const refusals = Object.entries(counts)
    .filter(([outcome, n]) => outcome !== 'ORDERED' && n > 0)
    .sort((a, b) => b[1] - a[1]);
  const table = byId('live-refusals');
  table.tBodies[0].replaceChildren(...refusals.map(([code, n]) => {
    const row = element('tr');
    row.dataset.code = code;
    row.append(element('td', 'reason', REASONS[code] || code), element('td', 'count', String(n)));
    return row;
  }));
  table.hidden = refusals.length === 0;
  byId('live-none').hidden = refusals.length > 0;
}

async function refreshLive() {
  const reply = await api('GET', '/metrics', { text: true });
  if (!reply.ok || typeof reply.data !== 'string') {
    byId('live-rate').textContent = '–';
    byId('live-ordered').textContent = '–';
    say(byId('live-note'), 'This instance serves no /metrics: orders and refusals are not shown.');
    return;
  }
  renderLive(purchaseCounts(reply.data));
}

// ---- Start ----

async function poll() {
  try {
    await Promise.all([refreshVouchers(), refreshLive()]);
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

byId('login').addEventListener('submit', logIn);
byId('logout').addEventListener('click', () => logOut());
renderSession();
poll().then(() => refreshOrders([...shop.vouchers.keys()]));
