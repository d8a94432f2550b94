// The bookkeeper's chat page: two devices on one session, and what the
// three locks decided for every try of every message. Plain JavaScript, no
// build step, no requests to anything but this server's /api/.
(() => {
  'use strict';

  const PROBLEM_BASE = 'https://rowlease.dev/problems/';
  // A message whose tries keep coming back busy is given up after this many
  // tries; the person can resend it (with the same id) by hand.
  const MAX_TRIES = 30;
  // How often the conversation and the ledger are read again while a
  // session is open, for a device in another browser.
  const POLL_MS = 4000;
  // In the "second message" race the phone sends once the laptop's message
  // is running (its question is stored), checking this often, at most
  // this long.
  const RUNNING_POLL_MS = 100;
  const RUNNING_WAIT_MS = 10000;
  // "wait for the reply" sends Prefer: wait=WAIT_S; a queued message's
  // status is read with it too, again until it is final.
  const WAIT_S = 30;
  // A status read that got no answer (or a 503) is tried again after this.
  const STATUS_RETRY_MS = 2000;
  // A Cancel that finds no request yet (its try has not reached the
  // server) is tried again this often, at most CANCEL_TRIES times.
  const CANCEL_RETRY_MS = 200;
  const CANCEL_TRIES = 25;

  // OUTCOMES says what one try of a message came back with, and what the
  // page does next. The key is "running", a 200's kind, "network", or the
  // last segment of a problem's type URI. tone: ok | wait | bad.
  // retry: resend automatically with the same client_request_id after
  // Retry-After. manual: offer a Resend button. Anything else is final.
  const OUTCOMES = {
    running: {label: 'running', tone: 'wait',
      help: 'sent; the server answers when the agent is done'},
    answered: {label: 'answered', tone: 'ok',
      help: 'took the session lock, ran the message once, stored the reply'},
    replayed: {label: 'replayed', tone: 'ok',
      help: 'the stored reply of an earlier run of this id: nothing ran, no lock was taken'},
    resumed: {label: 'resumed', tone: 'ok',
      help: 'took over a run that died; tool calls that had committed were reused, not repeated'},
    waited: {label: 'waited', tone: 'ok',
      help: 'sent with Prefer: wait=30 while this id was in flight or queued: the server waited for it and answered its stored reply (Preference-Applied)'},
    asked: {label: 'asks for approval', tone: 'wait',
      help: '202 waiting: the agent stopped to ask a person (an expense above the threshold); nothing is held while it waits. Approve or Deny, on either device, answers it (POST …/answers/{name}); the message then runs on'},
    approved: {label: 'approved here', tone: 'ok',
      help: 'this device answered the question: approved; the message ran on and the reply is its outcome (the same answer from another device gets the same outcome)'},
    denied: {label: 'denied here', tone: 'ok',
      help: 'this device answered the question: denied; nothing was booked'},
    queued: {label: 'queued', tone: 'wait',
      help: 'on_busy queue: 202, queued behind the running message (#1 runs next); the page reads its status with Prefer: wait=30 until it is done, without resending'},
    'session-busy': {label: 'session busy', tone: 'wait', retry: true,
      help: 'the session is answering another message; resent with the same id after Retry-After'},
    'queue-full': {label: 'queue full', tone: 'wait', retry: true,
      help: 'on_busy queue, but the session\'s queue is full; nothing stored; resent with the same id after Retry-After'},
    interrupted: {label: 'interrupted', tone: 'bad',
      help: 'a later message sent with on_busy interrupt stopped this one; its committed tool calls stay, and it never runs again (final, no resend)'},
    cancelled: {label: 'cancelled', tone: 'bad',
      help: 'cancelled with the Cancel button (DELETE …/messages/{id}); the tool calls it committed stay, and it never runs again: every resend of its id gets 409 cancelled (final, no resend)'},
    'request-in-flight': {label: 'in flight', tone: 'wait', retry: true,
      help: 'this very message is running (another device or an earlier try); resent after Retry-After to get its reply'},
    'tool-in-flight': {label: 'tool in flight', tone: 'wait', retry: true,
      help: 'a tool call of this message is running elsewhere; resent after Retry-After'},
    'taken-over': {label: 'taken over', tone: 'wait', retry: true,
      help: 'this run lost its lease to another run of the same message; resent to get that run\'s reply'},
    'client-request-id-reused': {label: 'id reused', tone: 'bad',
      help: 'this id was already used in this session with other content; nothing changed'},
    unavailable: {label: 'database unreachable', tone: 'wait', retry: true,
      help: 'the database cannot be reached; resent with the same id after Retry-After'},
    'database-busy': {label: 'database busy', tone: 'wait', retry: true,
      help: 'a transient database error; nothing committed; resent with the same id'},
    'shutting-down': {label: 'server stopping', tone: 'wait', retry: true,
      help: 'the server is stopping; the work so far is kept; resent with the same id'},
    'outcome-unknown': {label: 'outcome unknown', tone: 'wait', retry: true,
      help: 'an external effect\'s outcome is being reconciled; resent with the same id'},
    network: {label: 'no answer', tone: 'wait', retry: true,
      help: 'no response (network or server down); resent with the same id'},
    'model-failed': {label: 'model failed', tone: 'bad', manual: true,
      help: 'the language model failed; resend with the same id'},
    'agent-failed': {label: 'agent failed', tone: 'bad', manual: true,
      help: 'the agent failed; resend with the same id runs it again'},
    timeout: {label: 'timed out', tone: 'bad', manual: true,
      help: 'the run took too long; resend with the same id resumes it'},
    internal: {label: 'server error', tone: 'bad', manual: true,
      help: 'an internal error; resend with the same id'},
    'invalid-request': {label: 'invalid', tone: 'bad', help: 'the server refused the message as it is'},
    'session-not-found': {label: 'no such session', tone: 'bad', help: 'the session does not exist'},
  };
  // The rows the legend shows, in this order.
  const LEGEND = ['answered', 'replayed', 'resumed', 'waited', 'running', 'session-busy', 'queued', 'asked',
    'request-in-flight', 'interrupted', 'cancelled', 'queue-full', 'client-request-id-reused', 'network'];

  const $ = (id) => document.getElementById(id);

  // el builds an element: el('p', {class: 'x'}, 'text', child, ...).
  // Text is always set as text, never parsed as HTML.
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k.startsWith('data-')) e.dataset[k.slice(5).replace(/-(.)/g, (_, c) => c.toUpperCase())] = v;
      else e.setAttribute(k, v === true ? '' : v);
    }
    for (const c of children) {
      if (c === undefined || c === null || c === false) continue;
      e.append(c instanceof Node ? c : String(c));
    }
    return e;
  }

  const SVG_NS = 'http://www.w3.org/2000/svg';
  function svg(tag, attrs, ...children) {
    const e = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    for (const c of children) e.append(c instanceof Node ? c : String(c));
    return e;
  }

  // newRequestId returns a random UUIDv4. crypto.getRandomValues works on
  // plain http:// too, where crypto.randomUUID does not.
  function newRequestId() {
    const b = crypto.getRandomValues(new Uint8Array(16));
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    const h = Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
    return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
  }

  const short = (id) => (id ? id.slice(0, 8) : '');
  const hasHan = (s) => /\p{Script=Han}/u.test(s);

  // cents turns "35.00" into 3500; the page never sums floats.
  function cents(amount) {
    const m = /^(-?)(\d+)(?:\.(\d{1,2}))?$/.exec(String(amount));
    if (!m) return 0;
    const c = Number(m[2]) * 100 + Number((m[3] || '0').padEnd(2, '0'));
    return m[1] ? -c : c;
  }
  const money = (c) => `${c < 0 ? '-' : ''}${Math.floor(Math.abs(c) / 100)}.${String(Math.abs(c) % 100).padStart(2, '0')}`;

  // ---- state ---------------------------------------------------------------

  const state = {
    session: null,        // the open session's id
    messages: [],         // GET …/messages of the open session
    transactions: [],     // GET …/transactions
    totals: null,         // {income, expense}
    // The open questions of the session's messages, by client_request_id:
    // {name, question, deadline}, from a 202 waiting or the message's status.
    questions: new Map(),
    refreshing: null,     // the running refresh, if any
    refreshAgain: false,  // a refresh was asked for while one ran
  };

  // Device is one of the two panes: its own outbox of messages (entries),
  // each with the trail of its tries.
  class Device {
    constructor(name) {
      this.name = name;
      // {key, session, crid, content, onBusy, wait, tries, state, reply, transactionId, resendAt, timer}
      this.entries = [];
      // This pane's answers to questions, by client_request_id:
      // {name, approved, state: sending | retry | done | refused | failed, note, timer}.
      this.answers = new Map();
      this.shown = ''; // what the pane shows, as last drawn
      this.log = $(`${name}-log`);
      this.form = $(`${name}-form`);
      this.input = $(`${name}-input`);
      this.button = $(`${name}-send`);
      this.onBusy = $(`${name}-onbusy`);
      this.wait = $(`${name}-wait`);
      this.form.addEventListener('submit', (ev) => {
        ev.preventDefault();
        const content = this.input.value.trim();
        if (!content || !state.session) return;
        this.input.value = '';
        this.send(content);
      });
    }

    // send sends a new message: a new client_request_id, and the pane's
    // "when busy" and "wait" choices of now, all kept for every retry of it.
    send(content, crid = newRequestId()) {
      const entry = {key: newRequestId(), session: state.session, crid, content,
        onBusy: this.onBusy.value, wait: this.wait.checked, tries: [],
        state: 'new', reply: null, transactionId: null, resendAt: 0, timer: 0};
      this.entries.push(entry);
      this.attempt(entry);
      return entry;
    }

    lastEntry() {
      for (let i = this.entries.length - 1; i >= 0; i--) {
        if (this.entries[i].session === state.session) return this.entries[i];
      }
      return null;
    }

    async attempt(entry) {
      entry.state = 'running';
      entry.resendAt = 0;
      // One try: its outcome, HTTP status, Retry-After (seconds), problem
      // detail, and how long the page waited before the next try (wait);
      // for a queued one, its position and, once read, its final status.
      const t = {outcome: 'running', status: 0, retryAfter: 0, detail: '', wait: 0, position: 0, then: ''};
      entry.tries.push(t);
      render();
      let resp = null;
      let body = null;
      const headers = {'Content-Type': 'application/json', Accept: 'application/json'};
      if (entry.wait) headers.Prefer = `wait=${WAIT_S}`;
      try {
        resp = await fetch(`/api/sessions/${encodeURIComponent(entry.session)}/messages`, {
          method: 'POST',
          headers,
          body: JSON.stringify({content: entry.content, client_request_id: entry.crid, on_busy: entry.onBusy}),
        });
        body = await resp.json().catch(() => null);
      } catch (err) {
        resp = null;
      }
      if (!resp) {
        t.outcome = 'network';
        t.retryAfter = 2;
      } else if (resp.status === 202 && body && body.status === 'waiting' && body.waiting) {
        t.status = resp.status;
        t.outcome = 'asked';
        state.questions.set(entry.crid, body.waiting);
      } else if (resp.status === 202 && body && body.status === 'queued') {
        t.status = resp.status;
        t.outcome = 'queued';
        t.position = Number(body.position) || 0;
      } else if (resp.ok && body) {
        t.status = resp.status;
        const waited = resp.headers.has('Preference-Applied');
        t.outcome = waited ? 'waited' : body.replayed ? 'replayed' : body.resumed ? 'resumed' : 'answered';
        if (waited && body.replayed) t.detail = 'the stored reply';
        else if (body.replayed && body.resumed) t.detail = 'of a resumed run';
        entry.reply = body.reply;
        entry.transactionId = body.transaction_id;
      } else {
        t.status = resp.status;
        const type = body && typeof body.type === 'string' ? body.type : '';
        t.outcome = type.startsWith(PROBLEM_BASE) ? type.slice(PROBLEM_BASE.length) : `http-${resp.status}`;
        t.detail = body && body.detail ? body.detail : resp.statusText;
        t.retryAfter = Number(resp.headers.get('Retry-After')) || 0;
      }
      const o = OUTCOMES[t.outcome] || {retry: resp !== null && resp.status === 503};
      if (t.outcome === 'asked') {
        // Answered by a person, on this pane or the other: see answer and
        // refresh, which read the outcome.
        entry.state = 'asking';
        render();
        refreshSoon();
        return;
      }
      if (t.outcome === 'queued') {
        entry.state = 'queued';
        render();
        refreshSoon();
        await this.follow(entry, t);
        return;
      }
      if (o.retry && entry.tries.length < MAX_TRIES) {
        entry.state = 'waiting';
        const wait = Math.max(1, t.retryAfter || 1);
        t.wait = wait;
        entry.resendAt = Date.now() + wait * 1000;
        entry.timer = setTimeout(() => { entry.timer = 0; this.attempt(entry); }, wait * 1000);
        ensureTicker();
      } else if (resp && resp.ok && body) {
        entry.state = 'done';
      } else {
        entry.state = 'failed';
      }
      render();
      refreshSoon();
    }

    // follow reads a queued message's status (GET …/messages/{id}, with
    // Prefer: wait) until it is final, and shows its reply; it never
    // resends the message.
    async follow(entry, t) {
      const url = `/api/sessions/${encodeURIComponent(entry.session)}/messages/${encodeURIComponent(entry.crid)}`;
      for (;;) {
        let resp = null;
        let body = null;
        try {
          resp = await fetch(url, {headers: {Accept: 'application/json', Prefer: `wait=${WAIT_S}`}});
          body = await resp.json().catch(() => null);
        } catch (err) {
          resp = null;
        }
        if (resp && resp.ok && body) {
          if (body.status === 'queued') t.position = Number(body.position) || 0;
          t.then = body.status === 'queued' ? '' : body.status;
          if (body.status === 'succeeded') {
            entry.reply = body.reply;
            entry.transactionId = body.transaction_id;
            entry.state = 'done';
          } else if (body.status === 'failed' || body.status === 'interrupted' || body.status === 'cancelled') {
            entry.state = 'failed';
          }
          render();
          if (entry.state !== 'queued') break;
          continue;
        }
        if (resp && resp.status !== 503) {
          t.then = 'unknown';
          t.detail = body && body.detail ? body.detail : resp.statusText;
          entry.state = 'failed';
          render();
          break;
        }
        await new Promise((resolve) => { setTimeout(resolve, STATUS_RETRY_MS); });
      }
      refreshSoon();
    }

    // cancel asks the server to cancel a running or queued message
    // (DELETE …/messages/{id}). The message's own pending try then comes
    // back 409 cancelled, or a queued one's status reads cancelled. A 404
    // means the try has not reached the server yet: asked again shortly.
    async cancel(entry) {
      if (entry.cancelling) return;
      entry.cancelling = true;
      render();
      const url = `/api/sessions/${encodeURIComponent(entry.session)}/messages/${encodeURIComponent(entry.crid)}`;
      for (let i = 0; i < CANCEL_TRIES && (entry.state === 'running' || entry.state === 'queued' || entry.state === 'waiting'); i++) {
        let resp = null;
        let body = null;
        try {
          resp = await fetch(url, {method: 'DELETE', headers: {Accept: 'application/json'}});
          body = await resp.json().catch(() => null);
        } catch (err) {
          resp = null;
        }
        if (resp && (resp.ok || resp.status === 404) && entry.state === 'waiting') {
          // Between tries: no pending call will report it; say it here. A
          // 404: the server never accepted it, so it is only not resent.
          clearTimeout(entry.timer);
          entry.timer = 0;
          entry.tries.push({outcome: 'cancelled', status: resp.status, retryAfter: 0,
            detail: resp.ok ? '' : 'never accepted; not resent', wait: 0, position: 0, then: ''});
          entry.state = 'failed';
          break;
        }
        if (resp && resp.ok) break;
        if (resp && resp.status !== 404 && resp.status !== 503) {
          notice(`Could not cancel: ${(body && body.detail) || resp.statusText}`);
          break;
        }
        await new Promise((resolve) => { setTimeout(resolve, CANCEL_RETRY_MS); });
      }
      entry.cancelling = false;
      render();
      refreshSoon();
    }

    // answer posts this pane's answer to the question a message waits for
    // (POST …/messages/{id}/answers/{name}). The same answer from both
    // panes gets the same outcome; another one after the first is a 409,
    // told politely. A busy session or a message in flight: sent again
    // after Retry-After.
    async answer(crid, name, approved) {
      const prev = this.answers.get(crid);
      if (prev && (prev.state === 'sending' || prev.state === 'retry')) return;
      const a = {name, approved, state: 'sending', note: '', timer: 0};
      this.answers.set(crid, a);
      render();
      const session = state.session;
      let resp = null;
      let body = null;
      try {
        resp = await fetch(`/api/sessions/${encodeURIComponent(session)}/messages/${encodeURIComponent(crid)}/answers/${encodeURIComponent(name)}`, {
          method: 'POST',
          headers: {'Content-Type': 'application/json', Accept: 'application/json'},
          body: JSON.stringify({approved}),
        });
        body = await resp.json().catch(() => null);
      } catch (err) {
        resp = null;
      }
      const type = resp && !resp.ok && body && typeof body.type === 'string' && body.type.startsWith(PROBLEM_BASE)
        ? body.type.slice(PROBLEM_BASE.length) : '';
      const mine = this.entries.find((e) => e.session === session && e.crid === crid);
      if (resp && resp.status === 200 && body) {
        a.state = 'done';
        state.questions.delete(crid);
        if (mine) {
          mine.tries.push({outcome: approved ? 'approved' : 'denied', status: 200, retryAfter: 0, detail: '', wait: 0, position: 0, then: ''});
          mine.reply = body.reply;
          mine.transactionId = body.transaction_id;
          mine.state = 'done';
        }
      } else if (resp && resp.status === 202 && body && body.status === 'waiting' && body.waiting) {
        // The message ran on to another question.
        this.answers.delete(crid);
        state.questions.set(crid, body.waiting);
      } else if (!resp || resp.status === 503 || (resp.status === 409 && (OUTCOMES[type] || {}).retry)) {
        a.state = 'retry';
        const wait = Math.max(1, Number(resp && resp.headers.get('Retry-After')) || 2);
        a.note = `${resp ? (OUTCOMES[type] || {}).label || resp.status : 'no answer'}; sending the answer again in ${wait} s`;
        a.timer = setTimeout(() => { a.state = 'again'; this.answer(crid, name, approved); }, wait * 1000);
      } else if (resp.status === 409) {
        a.state = 'refused';
        a.note = ANSWER_REFUSED[type] || ANSWER_REFUSED['not-waiting'];
      } else {
        a.state = 'failed';
        a.note = `Could not send the answer: ${(body && body.detail) || resp.statusText}`;
      }
      render();
      refreshSoon();
    }

    resend(entry) {
      if (entry.state === 'running' || entry.state === 'queued') return;
      clearTimeout(entry.timer);
      entry.timer = 0;
      this.attempt(entry);
    }
  }

  // ---- rendering -------------------------------------------------------------

  // turns groups the open session's stored messages by client_request_id,
  // in the order the questions were asked.
  function turns() {
    const byID = new Map();
    const out = [];
    for (const m of state.messages) {
      let t = byID.get(m.client_request_id);
      if (!t) {
        t = {crid: m.client_request_id, user: null, assistant: null};
        byID.set(t.crid, t);
        out.push(t);
      }
      t[m.role === 'user' ? 'user' : 'assistant'] = m;
    }
    return out;
  }

  function outcomeChip(t, entry, last) {
    // An answer the table does not know shows its problem type, or "error".
    const o = OUTCOMES[t.outcome] || {label: t.outcome.startsWith('http-') ? 'error' : t.outcome, tone: 'bad', help: t.detail};
    const text = [o.label];
    if (t.status && t.status !== 200) text.unshift(String(t.status));
    if (t.outcome === 'queued') text.push(`#${t.position + 1}`);
    if (t.detail && (t.outcome === 'replayed' || t.outcome === 'waited')) text.push(t.detail);
    const chip = el('li', {class: `chip ${o.tone}`, 'data-outcome': t.outcome, title: o.help || t.detail || ''},
      text.join(' '));
    if (t.outcome === 'queued') {
      chip.append(t.then ? ` · then ${STATUS_WORDS[t.then] || t.then}` : ' · waiting for its turn');
    }
    if (t.wait) {
      if (last && entry.state === 'waiting') {
        chip.append(t.status ? ` · Retry-After ${t.wait} s · resending in ` : ' · resending in ',
          el('span', {'data-countdown': entry.key, 'aria-hidden': 'true'}, String(secondsLeft(entry))), ' s');
      } else {
        chip.append(` · resent after ${t.wait} s`);
      }
    }
    return chip;
  }

  // STATUS_WORDS says what became of a queued message, as its status said.
  const STATUS_WORDS = {processing: 'running', succeeded: 'answered', failed: 'failed',
    interrupted: 'interrupted', cancelled: 'cancelled', unknown: 'status unreadable'};

  // ANSWER_REFUSED says, politely, why an answer was not taken (a 409 by
  // its problem type): the other device was first, the question closed.
  const ANSWER_REFUSED = {
    'already-answered': 'Already answered on the other device; your answer was not taken.',
    'wait-expired': 'This question expired before your answer; nothing was booked.',
    'not-waiting': 'This question is no longer open; your answer changed nothing.',
  };

  const APPROVE_WORDS = {approve: 'Approve', deny: 'Deny', approving: 'Approving…', denying: 'Denying…'};

  // renderQuestion draws the open question of a turn on a pane, with its
  // Approve and Deny buttons (gone once this pane's answer was taken or
  // refused).
  function renderQuestion(dev, crid, q) {
    const a = dev.answers.get(crid);
    const ask = q.question && typeof q.question === 'object' ? q.question : {};
    const box = el('div', {class: 'question', role: 'group', 'data-name': q.name,
      'aria-label': `Question of the agent: ${ask.text || q.name}`});
    box.append(el('p', {class: 'q-text', lang: hasHan(ask.text || '') ? 'zh' : 'en'}, ask.text || `The agent asks (${q.name}).`));
    const details = [];
    if (ask.amount) details.push(`${ask.type || ''} ${ask.amount}`.trim());
    if (ask.category) details.push(ask.category);
    if (ask.description) details.push(`“${ask.description}”`);
    if (q.deadline) details.push(`expires ${new Date(q.deadline).toLocaleTimeString()}`);
    if (details.length) box.append(el('p', {class: 'q-meta'}, details.join(' · ')));
    if (!a || a.state === 'failed' || a.state === 'sending' || a.state === 'retry' || a.state === 'again') {
      const busy = a && a.state !== 'failed';
      const actions = el('div', {class: 'q-actions'});
      for (const [key, approved] of [['approve', true], ['deny', false]]) {
        const label = busy && a.approved === approved ? APPROVE_WORDS[approved ? 'approving' : 'denying'] : APPROVE_WORDS[key];
        const b = el('button', {type: 'button', class: `answer ${key}`, 'data-answer': key, disabled: busy}, label);
        b.addEventListener('click', () => dev.answer(crid, q.name, approved));
        actions.append(b);
      }
      box.append(actions);
    }
    if (a && a.note) box.append(el('p', {class: 'answer-note'}, a.note));
    return box;
  }

  const secondsLeft = (entry) => Math.max(0, Math.ceil((entry.resendAt - Date.now()) / 1000));

  function finalOutcome(entry) {
    if (entry.state === 'done' || entry.state === 'failed') return entry.tries[entry.tries.length - 1].outcome;
    return '';
  }

  function renderTurn(dev, turn, entry) {
    const content = turn && turn.user ? turn.user.content : entry.content;
    const li = el('li', {
      class: `turn${entry ? ' mine' : ''}`,
      'data-crid': turn ? turn.crid : entry.crid,
      'data-state': entry ? entry.state : 'stored',
      'data-final': entry ? finalOutcome(entry) : '',
      'data-key': entry ? entry.key : '',
    });
    li.append(el('p', {class: 'bubble user', lang: hasHan(content) ? 'zh' : 'en'}, content));
    const meta = el('p', {class: 'meta'}, 'client_request_id ', el('code', {title: turn ? turn.crid : entry.crid},
      short(turn ? turn.crid : entry.crid)));
    if (!entry) meta.append(' · sent from another device');
    li.append(meta);
    if (entry) {
      const trail = el('ol', {class: 'trail', 'aria-label': 'what the locks said, try by try'});
      entry.tries.forEach((t, i) => trail.append(outcomeChip(t, entry, i === entry.tries.length - 1)));
      li.append(trail);
      const final = finalOutcome(entry);
      const o = OUTCOMES[final];
      // A queued message that then failed can be resent; one interrupted
      // or cancelled never runs again.
      const then = entry.tries[entry.tries.length - 1].then;
      const queuedFailed = final === 'queued' && then !== 'interrupted' && then !== 'cancelled';
      if (entry.state === 'failed' && (!o || o.manual || o.retry || queuedFailed)) {
        const b = el('button', {type: 'button', class: 'resend'}, 'Resend (same id)');
        b.addEventListener('click', () => dev.resend(entry));
        li.append(b);
      }
      // A message still running, queued or waiting to be resent can be
      // cancelled.
      if (entry.state === 'running' || entry.state === 'queued' || entry.state === 'waiting') {
        const b = el('button', {type: 'button', class: 'cancel', disabled: entry.cancelling,
          title: 'DELETE this message: it stops, keeps what it committed, and never runs again'},
        entry.cancelling ? 'Cancelling…' : 'Cancel');
        b.addEventListener('click', () => dev.cancel(entry));
        li.append(b);
      }
    }
    const reply = turn && turn.assistant ? turn.assistant.content : entry && entry.reply;
    const crid = turn ? turn.crid : entry.crid;
    const q = state.questions.get(crid);
    const a = dev.answers.get(crid);
    if (!reply && q) {
      li.append(renderQuestion(dev, crid, q));
    } else if (a && a.state === 'refused') {
      li.append(el('p', {class: 'answer-note'}, a.note));
    }
    if (reply) {
      li.append(el('p', {class: 'bubble bot', lang: hasHan(reply) ? 'zh' : 'en'}, reply));
      const tx = entry && entry.transactionId;
      if (tx) li.append(el('p', {class: 'meta bot-meta'}, 'transaction ', el('code', {title: tx}, short(tx))));
    } else if (!q && (!entry || entry.state === 'running' || entry.state === 'waiting' || entry.state === 'queued')) {
      li.append(el('p', {class: 'bubble bot pending'}, '…'));
    }
    return li;
  }

  // renderDevice redraws a pane when what it shows has changed (not on
  // every poll: the log is a live region, and a screen reader would read
  // it again).
  function renderDevice(dev) {
    const mine = dev.entries.filter((e) => e.session === state.session);
    const sig = JSON.stringify([state.session, state.messages, [...state.questions],
      [...dev.answers].map(([k, a]) => [k, a.state, a.note, a.approved]),
      mine.map((e) => [e.key, e.state, e.reply, e.transactionId, e.tries, Boolean(e.cancelling)])]);
    if (sig === dev.shown) return;
    dev.shown = sig;
    const items = [];
    const shown = new Set();
    for (const turn of turns()) {
      // An entry joins a stored turn when it sent the same content with
      // the same id; a 422 try (same id, other content) is shown on its own.
      const entry = mine.find((e) => e.crid === turn.crid && turn.user && e.content === turn.user.content);
      if (entry) shown.add(entry);
      items.push(renderTurn(dev, turn, entry));
    }
    for (const e of mine) if (!shown.has(e)) items.push(renderTurn(dev, null, e));
    const atBottom = dev.log.scrollHeight - dev.log.scrollTop - dev.log.clientHeight < 40;
    dev.log.replaceChildren(...items);
    if (!items.length) {
      dev.log.append(el('li', {class: 'empty'}, state.session ? 'No messages yet.' : 'No session open.'));
    }
    if (atBottom) dev.log.scrollTop = dev.log.scrollHeight;
  }

  const PALETTE = ['#2f6fb0', '#d0782a', '#3c9a5f', '#b8436a', '#7a5bb5', '#9a7b28', '#2a8f98', '#c2523b', '#5f6b7a'];
  const colours = new Map();
  function colour(key) {
    if (!colours.has(key)) colours.set(key, PALETTE[colours.size % PALETTE.length]);
    return colours.get(key);
  }

  let ledgerShown = '';
  function renderLedger() {
    const sig = JSON.stringify([state.session, state.transactions, state.totals]);
    if (sig === ledgerShown) return;
    ledgerShown = sig;
    const tbody = $('ledger-table').tBodies[0];
    const rows = state.transactions.map((t) => el('tr', {'data-crid': t.client_request_id, 'data-id': t.id},
      el('td', {}, t.occur_date),
      el('td', {}, t.type),
      el('td', {}, `${t.category_en} `, el('span', {lang: 'zh'}, t.category)),
      el('td', {class: `num ${t.type}`}, `${t.type === 'income' ? '+' : '−'}${t.amount}`),
      el('td', {lang: hasHan(t.note) ? 'zh' : 'en'}, t.note),
      el('td', {}, el('code', {title: t.client_request_id}, short(t.client_request_id)))));
    if (!rows.length) rows.push(el('tr', {}, el('td', {colspan: 6, class: 'empty'}, 'No transactions yet.')));
    tbody.replaceChildren(...rows);
    const tot = state.totals;
    $('totals').replaceChildren(...(tot ? [
      el('span', {}, `${state.transactions.length} transaction${state.transactions.length === 1 ? '' : 's'}`),
      el('span', {class: 'income'}, `income ${tot.income}`),
      el('span', {class: 'expense'}, `spending ${tot.expense}`),
      el('span', {}, `balance ${money(cents(tot.income) - cents(tot.expense))}`),
    ] : []));
    renderCategoryChart();
    renderDayChart();
  }

  function spending() {
    return state.transactions.filter((t) => t.type === 'expense');
  }

  function renderCategoryChart() {
    const chart = $('chart-category');
    const sums = new Map();
    for (const t of spending()) {
      const s = sums.get(t.category_en) || {en: t.category_en, zh: t.category, cents: 0};
      s.cents += cents(t.amount);
      sums.set(t.category_en, s);
    }
    const rows = [...sums.values()].sort((a, b) => b.cents - a.cents || a.en.localeCompare(b.en));
    const W = 480; const rowH = 28; const labelW = 150; const valueW = 70;
    const H = Math.max(40, rows.length * rowH + 8);
    chart.setAttribute('viewBox', `0 0 ${W} ${H}`);
    const max = Math.max(1, ...rows.map((r) => r.cents));
    const parts = rows.map((r, i) => {
      const y = 4 + i * rowH;
      const w = Math.max(2, Math.round((W - labelW - valueW) * r.cents / max));
      return svg('g', {'data-category': r.en, 'data-cents': r.cents},
        svg('title', {}, `${r.en} ${r.zh}: ${money(r.cents)}`),
        svg('text', {x: labelW - 8, y: y + rowH / 2 + 5, 'text-anchor': 'end', class: 'label'}, `${r.en} ${r.zh}`),
        svg('rect', {x: labelW, y: y + 4, width: w, height: rowH - 10, rx: 3, fill: colour(r.en)}),
        svg('text', {x: labelW + w + 6, y: y + rowH / 2 + 5, class: 'value'}, money(r.cents)));
    });
    if (!parts.length) parts.push(svg('text', {x: 8, y: 24, class: 'label'}, 'No spending yet.'));
    chart.setAttribute('aria-label', rows.length
      ? `Spending by category: ${rows.map((r) => `${r.en} ${money(r.cents)}`).join(', ')}`
      : 'Spending by category: none yet');
    chart.replaceChildren(...parts);
  }

  // days lists the dates from first to last, at most n of them, ending at last.
  function days(first, last, n) {
    const out = [];
    const d = new Date(`${last}T00:00:00Z`);
    const stop = new Date(`${first}T00:00:00Z`);
    while (out.length < n && d >= stop) {
      out.unshift(d.toISOString().slice(0, 10));
      d.setUTCDate(d.getUTCDate() - 1);
    }
    return out;
  }

  function renderDayChart() {
    const chart = $('chart-day');
    const sums = new Map();
    for (const t of spending()) sums.set(t.occur_date, (sums.get(t.occur_date) || 0) + cents(t.amount));
    const dates = [...sums.keys()].sort();
    const W = 480; const H = 180; const top = 20; const bottom = 24;
    const span = dates.length ? days(dates[0], dates[dates.length - 1], 14) : [];
    const max = Math.max(1, ...sums.values());
    const slot = span.length ? (W - 16) / span.length : 0;
    const parts = [svg('line', {x1: 8, y1: H - bottom, x2: W - 8, y2: H - bottom, class: 'axis'})];
    span.forEach((day, i) => {
      const c = sums.get(day) || 0;
      const h = c ? Math.max(2, Math.round((H - top - bottom) * c / max)) : 0;
      const x = 8 + i * slot;
      const bw = Math.min(40, slot * 0.7);
      const g = svg('g', {'data-day': day, 'data-cents': c},
        svg('title', {}, `${day}: ${money(c)}`),
        svg('rect', {x: x + (slot - bw) / 2, y: H - bottom - h, width: bw, height: h, rx: 3, class: 'bar'}),
        svg('text', {x: x + slot / 2, y: H - 8, 'text-anchor': 'middle', class: 'label'}, day.slice(5)));
      if (c) g.append(svg('text', {x: x + slot / 2, y: H - bottom - h - 5, 'text-anchor': 'middle', class: 'value'}, money(c)));
      parts.push(g);
    });
    if (!span.length) parts.push(svg('text', {x: 8, y: 24, class: 'label'}, 'No spending yet.'));
    chart.setAttribute('aria-label', span.length
      ? `Spending by day: ${dates.map((d) => `${d} ${money(sums.get(d))}`).join(', ')}`
      : 'Spending by day: none yet');
    chart.replaceChildren(...parts);
  }

  function renderLegend() {
    $('legend').replaceChildren(...LEGEND.flatMap((k) => [
      el('dt', {}, el('span', {class: `chip ${OUTCOMES[k].tone}`}, OUTCOMES[k].label)),
      el('dd', {}, OUTCOMES[k].help),
    ]));
  }

  let renderQueued = false;
  function render() {
    if (renderQueued) return;
    renderQueued = true;
    queueMicrotask(() => {
      renderQueued = false;
      for (const d of devices) renderDevice(d);
      renderLedger();
      const open = Boolean(state.session);
      for (const d of devices) {
        for (const c of [d.input, d.button, d.onBusy, d.wait]) c.disabled = !open;
      }
      $('races').disabled = !open;
      document.body.dataset.session = state.session || '';
    });
  }

  // The countdowns of messages waiting for Retry-After tick here; the timer
  // stops when nothing waits.
  let ticker = 0;
  function ensureTicker() {
    if (ticker) return;
    ticker = setInterval(() => {
      let waiting = false;
      for (const d of devices) {
        for (const e of d.entries) {
          if (e.state !== 'waiting') continue;
          waiting = true;
          const span = document.querySelector(`[data-countdown="${e.key}"]`);
          if (span) span.textContent = String(secondsLeft(e));
        }
      }
      if (!waiting) { clearInterval(ticker); ticker = 0; }
    }, 250);
  }

  // ---- the server ----------------------------------------------------------

  function notice(text) { $('notice').textContent = text || ''; }

  async function getJSON(path) {
    const resp = await fetch(path, {headers: {Accept: 'application/json'}});
    const body = await resp.json().catch(() => null);
    if (!resp.ok) {
      const err = new Error((body && (body.detail || body.title)) || resp.statusText);
      err.status = resp.status;
      err.type = body && body.type;
      throw err;
    }
    return body;
  }

  // refresh reads the open session's conversation and ledger. Calls made
  // while one runs are folded into one more run after it.
  function refresh() {
    if (state.refreshing) { state.refreshAgain = true; return state.refreshing; }
    const id = state.session;
    if (!id) return Promise.resolve();
    const base = `/api/sessions/${encodeURIComponent(id)}`;
    state.refreshing = Promise.all([getJSON(`${base}/messages`), getJSON(`${base}/transactions`)])
      .then(([m, t]) => {
        if (state.session !== id) return null;
        state.messages = m.messages;
        state.transactions = t.transactions;
        state.totals = {income: t.total_income, expense: t.total_expense};
        notice('');
        return readQuestions(id);
      }).then(() => {}, (err) => {
        if (state.session === id) notice(`Could not read the session: ${err.message}`);
      })
      .finally(() => {
        state.refreshing = null;
        render();
        if (state.refreshAgain) { state.refreshAgain = false; refresh(); }
      });
    return state.refreshing;
  }

  // readQuestions reads the status of every message of the session that
  // has no reply yet, or an open question: that is how a pane learns of a
  // question another device's message asked, and of its outcome once
  // someone answered it.
  async function readQuestions(id) {
    const crids = new Set(state.questions.keys());
    for (const turn of turns()) if (turn.user && !turn.assistant) crids.add(turn.crid);
    for (const d of devices) for (const e of d.entries) if (e.session === id && e.state === 'asking') crids.add(e.crid);
    const base = `/api/sessions/${encodeURIComponent(id)}/messages/`;
    await Promise.all([...crids].map(async (crid) => {
      let st;
      try {
        st = await getJSON(base + encodeURIComponent(crid));
      } catch (err) {
        if (err.status === 404 || err.status === 410) state.questions.delete(crid);
        return;
      }
      if (state.session !== id) return;
      if (st.status === 'waiting' && st.waiting) {
        const was = state.questions.get(crid);
        state.questions.set(crid, st.waiting);
        // A later question: this pane's answer was to the one before.
        for (const d of devices) {
          const a = d.answers.get(crid);
          if (was && was.name !== st.waiting.name && a && a.state === 'done') d.answers.delete(crid);
        }
      } else if (st.status !== 'processing' && st.status !== 'queued') {
        state.questions.delete(crid);
      }
      for (const d of devices) {
        for (const e of d.entries) {
          if (e.session !== id || e.crid !== crid || e.state !== 'asking') continue;
          if (st.status === 'succeeded') {
            e.reply = st.reply;
            e.transactionId = st.transaction_id;
            e.state = 'done';
          } else if (st.status !== 'waiting' && st.status !== 'processing' && st.status !== 'queued') {
            e.state = 'failed';
          }
        }
      }
    }));
  }

  let refreshTimer = 0;
  function refreshSoon() {
    clearTimeout(refreshTimer);
    refreshTimer = setTimeout(refresh, 50);
  }

  // ---- sessions --------------------------------------------------------------

  const RECENT_KEY = 'bookkeeper.sessions';
  function recent() {
    try {
      const v = JSON.parse(localStorage.getItem(RECENT_KEY) || '[]');
      return Array.isArray(v) ? v.filter((s) => typeof s === 'string') : [];
    } catch (err) {
      return [];
    }
  }
  function remember(id) {
    const list = [id, ...recent().filter((s) => s !== id)].slice(0, 10);
    try { localStorage.setItem(RECENT_KEY, JSON.stringify(list)); } catch (err) { /* private mode */ }
    renderRecent();
  }
  function forget(id) {
    try { localStorage.setItem(RECENT_KEY, JSON.stringify(recent().filter((s) => s !== id))); } catch (err) { /* */ }
    renderRecent();
  }
  function renderRecent() {
    $('recent-sessions').replaceChildren(...recent().map((id) => el('option', {value: id})));
  }

  async function openSession(id) {
    id = id.trim();
    if (!id || id === state.session) return;
    try {
      await getJSON(`/api/sessions/${encodeURIComponent(id)}`);
    } catch (err) {
      if (err.status === 404) forget(id);
      notice(err.status === 404 ? `No session ${id}.` : `Could not open the session: ${err.message}`);
      return;
    }
    state.session = id;
    state.messages = [];
    state.transactions = [];
    state.totals = null;
    $('session-id').value = id;
    if (location.hash !== `#session=${id}`) history.replaceState(null, '', `#session=${encodeURIComponent(id)}`);
    remember(id);
    notice('');
    render();
    await refresh();
  }

  async function newSession() {
    try {
      const resp = await fetch('/api/sessions', {method: 'POST', headers: {Accept: 'application/json'}});
      const body = await resp.json().catch(() => null);
      if (!resp.ok || !body) throw new Error((body && body.detail) || resp.statusText);
      await openSession(body.id);
      devices[0].input.focus();
    } catch (err) {
      notice(`Could not create a session: ${err.message}`);
    }
  }

  function sessionFromHash() {
    const m = /^#session=(.+)$/.exec(location.hash);
    return m ? decodeURIComponent(m[1]) : '';
  }

  // ---- races ---------------------------------------------------------------

  function raceText(id) {
    const input = $(id);
    const v = input.value.trim();
    if (!v) input.focus();
    return v;
  }

  const devices = [new Device('laptop'), new Device('phone')];
  const [laptop, phone] = devices;

  $('race-double').addEventListener('click', () => {
    const text = raceText('race-a');
    if (!text) return;
    const crid = newRequestId();
    laptop.send(text, crid);
    phone.send(text, crid);
  });

  // whenRunning resolves once entry's question is stored on the server
  // (its run holds the session), or once its try has ended.
  async function whenRunning(entry) {
    const deadline = Date.now() + RUNNING_WAIT_MS;
    while (entry.state === 'running' && Date.now() < deadline) {
      try {
        const m = await getJSON(`/api/sessions/${encodeURIComponent(entry.session)}/messages`);
        if (m.messages.some((x) => x.client_request_id === entry.crid)) return;
      } catch (err) {
        return;
      }
      await new Promise((resolve) => { setTimeout(resolve, RUNNING_POLL_MS); });
    }
  }

  $('race-second').addEventListener('click', async () => {
    const a = raceText('race-a');
    const b = a && raceText('race-b');
    if (!b) return;
    const first = laptop.send(a);
    await whenRunning(first);
    phone.send(b);
  });

  $('race-behind').addEventListener('click', async () => {
    const a = raceText('race-a');
    const b = a && raceText('race-b');
    if (!b) return;
    const first = phone.send(b);
    await whenRunning(first);
    laptop.send(a);
  });

  $('race-reuse').addEventListener('click', () => {
    const text = raceText('race-b');
    if (!text) return;
    const last = laptop.lastEntry();
    if (!last) { notice('Send a message from the laptop first: its id is the one reused.'); return; }
    if (last.content === text) { notice('Pick a phone message that differs from the laptop\'s last one.'); return; }
    phone.send(text, last.crid);
  });

  // ---- start ---------------------------------------------------------------

  $('new-session').addEventListener('click', newSession);
  $('session-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    openSession($('session-id').value);
  });
  window.addEventListener('hashchange', () => {
    const id = sessionFromHash();
    if (id) openSession(id);
  });
  setInterval(() => {
    if (state.session && document.visibilityState === 'visible') refresh();
  }, POLL_MS);

  renderLegend();
  renderRecent();
  render();
  const start = sessionFromHash();
  if (start) openSession(start);
  document.body.dataset.ready = 'true';
})();
