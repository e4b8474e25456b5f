// The edge's chat page in a real browser: Debian's Chromium, headless, driven
// by playwright-core (tests/js/package.json). Run by tests/e2e/web_ui_test.sh
// against a real baton-prefill + baton-edge --http with an API key.
//
// Environment:
//   BATON_WEB_URL      the page, e.g. http://127.0.0.1:8080/
//   BATON_API_KEY      a key of the agent's --api-key-file ("" when none)
//   BATON_SCREENSHOT   where to write the PNG (optional)
//   BATON_CHROMIUM     the browser (default /usr/bin/chromium)
//
// What must hold: without a key the page says so in words (401); with the key
// saved, a turn with policy cloud streams its text (text/event-stream) and
// shows the cloud's prefill time, the KV bytes, the plan and a chart; the
// session list shows the session; a follow-up turn continues it (a longer
// context); no Content-Security-Policy violation or script error; and the
// screenshot is a PNG of the viewport's size with real content (many
// colours, a good share of non-background pixels).
import { chromium } from 'playwright-core';
import { writeFileSync } from 'node:fs';
import { inflateSync } from 'node:zlib';

const url = process.env.BATON_WEB_URL;
const apiKey = process.env.BATON_API_KEY || '';
const screenshotPath = process.env.BATON_SCREENSHOT || '';
const executablePath = process.env.BATON_CHROMIUM || '/usr/bin/chromium';
const viewport = { width: 1280, height: 960 };
const turnTimeoutMs = 120000;

function check(condition, message) {
  if (!condition) throw new Error(message);
}

// A PNG (8-bit RGB or RGBA, not interlaced, as Chromium writes it) ->
// {width, height, channels, pixels}: the IDAT stream inflated and unfiltered.
export function decodePng(buffer) {
  check(buffer.subarray(0, 8).equals(Buffer.from([137, 80, 78, 71, 13, 10, 26, 10])), 'not a PNG signature');
  let pos = 8;
  let header = null;
  const idat = [];
  while (pos + 8 <= buffer.length) {
    const length = buffer.readUInt32BE(pos);
    const type = buffer.toString('ascii', pos + 4, pos + 8);
    const data = buffer.subarray(pos + 8, pos + 8 + length);
    if (type === 'IHDR') {
      header = { width: data.readUInt32BE(0), height: data.readUInt32BE(4), bitDepth: data[8], colorType: data[9],
        interlace: data[12] };
    } else if (type === 'IDAT') {
      idat.push(data);
    } else if (type === 'IEND') {
      break;
    }
    pos += 12 + length;
  }
  check(header !== null, 'no IHDR chunk');
  check(header.bitDepth === 8 && (header.colorType === 2 || header.colorType === 6) && header.interlace === 0,
    `unsupported PNG: bit depth ${header.bitDepth}, colour type ${header.colorType}, interlace ${header.interlace}`);
  const channels = header.colorType === 6 ? 4 : 3;
  const stride = header.width * channels;
  const raw = inflateSync(Buffer.concat(idat));
  check(raw.length === header.height * (stride + 1), `IDAT holds ${raw.length} bytes, not ${header.height * (stride + 1)}`);
  const pixels = Buffer.alloc(header.height * stride);
  for (let y = 0; y < header.height; y++) {
    const filter = raw[y * (stride + 1)];
    const line = y * (stride + 1) + 1;
    const row = y * stride;
    for (let x = 0; x < stride; x++) {
      const a = x >= channels ? pixels[row + x - channels] : 0;
      const b = y > 0 ? pixels[row - stride + x] : 0;
      const c = x >= channels && y > 0 ? pixels[row - stride + x - channels] : 0;
      let predictor = 0;
      if (filter === 1) predictor = a;
      else if (filter === 2) predictor = b;
      else if (filter === 3) predictor = (a + b) >> 1;
      else if (filter === 4) {
        const p = a + b - c;
        const pa = Math.abs(p - a);
        const pb = Math.abs(p - b);
        const pc = Math.abs(p - c);
        predictor = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
      } else check(filter === 0, `unknown PNG filter ${filter} on row ${y}`);
      pixels[row + x] = (raw[line + x] + predictor) & 255;
    }
  }
  return { width: header.width, height: header.height, channels, pixels };
}

// Distinct RGB colours and the share of pixels that differ from the most
// common colour (the background).
export function pngContent(image) {
  const counts = new Map();
  for (let i = 0; i < image.pixels.length; i += image.channels) {
    const rgb = (image.pixels[i] << 16) | (image.pixels[i + 1] << 8) | image.pixels[i + 2];
    counts.set(rgb, (counts.get(rgb) || 0) + 1);
  }
  const total = image.width * image.height;
  const background = Math.max(...counts.values());
  return { colours: counts.size, foreground: 1 - background / total };
}

async function sendTurn(page, text, policy, turn) {
  await page.selectOption('#policy', policy);
  await page.fill('#prompt', text);
  await page.press('#prompt', 'Enter');
  const answer = page.locator('#messages .msg.assistant').nth(turn);
  await answer.and(page.locator('[data-done]')).waitFor({ timeout: turnTimeoutMs });
  const done = await answer.getAttribute('data-done');
  check(done === 'true', `turn ${turn + 1} ended '${done}': ${await answer.locator('.text').textContent()}`);
  return answer;
}

async function field(answer, name) {
  const figure = answer.locator(`.stats [data-field="${name}"]`);
  check(await figure.count() === 1, `the stats show no ${name}`);
  return { text: await figure.textContent(), value: await figure.getAttribute('data-value') };
}

async function main() {
  check(url, 'BATON_WEB_URL is not set');
  const browser = await chromium.launch({ executablePath, args: ['--no-sandbox', '--headless=new'] });
  const problems = [];
  try {
    const page = await browser.newPage({ viewport });
    page.on('pageerror', (error) => problems.push(`script error: ${error.message}`));
    page.on('console', (message) => {
      // A CSP violation is reported on the console; so is a failed load.
      if (message.type() === 'error' && !/status of 401/.test(message.text())) {
        problems.push(`console: ${message.text()}`);
      }
    });
    const streamTypes = [];
    page.on('response', (response) => {
      if (response.url().endsWith('/v1/chat/completions') && response.status() === 200) {
        streamTypes.push(response.headers()['content-type']);
      }
    });
    await page.goto(url);
    check(await page.title() === 'Baton chat', `page title '${await page.title()}'`);
    await page.locator('#health.ok').waitFor({ timeout: 30000 });

    if (apiKey) {
      // Without a key: a message in words, and the turn is not lost.
      await page.locator('#notice:not([hidden])').waitFor({ timeout: 10000 });
      await page.fill('#prompt', 'Hello?');
      await page.press('#prompt', 'Enter');
      await page.locator('#messages .msg.assistant.failed').waitFor({ timeout: 10000 });
      const notice = await page.locator('#notice').textContent();
      check(/needs an API key/.test(notice) && /--api-key-file/.test(notice), `401 notice: '${notice}'`);
      check(await page.inputValue('#prompt') === 'Hello?', 'the refused message was not put back');
      await page.fill('#api-key', apiKey);
      await page.click('#key-form button');
      await page.locator('#sessions-note', { hasText: 'No sessions yet.' }).waitFor({ timeout: 10000 });
      check(await page.evaluate(() => localStorage.getItem('baton.apiKey')) === apiKey, 'key not in localStorage');
    }

    // Turn 1, policy cloud: the cloud prefills, the agent takes the KV over.
    const first = await sendTurn(page,
      'And God said, Let there be light: and there was light. And God saw the light, that it was good: ' +
      'and God divided the light from the darkness.', 'cloud', 0);
    const firstText = (await first.locator('.text').textContent()).trim();
    check(firstText.length > 0, 'turn 1: no text');
    const cloudPrefill = await field(first, 'cloud_prefill_ms');
    check(Number(cloudPrefill.value) > 0 && /^cloud prefill [0-9.]+ m?s$/.test(cloudPrefill.text),
      `cloud prefill '${cloudPrefill.text}'`);
    const kv = await field(first, 'kv_bytes');
    check(Number(kv.value) > 0 && /iB \/ .*iB \/ .*iB/.test(kv.text), `KV bytes '${kv.text}'`);
    const policy = await field(first, 'policy');
    check(policy.text === 'cloud → cloud', `policy row '${policy.text}'`);
    const reason = await field(first, 'plan_reason');
    check(reason.text.length > 0, 'no plan reason');
    const ttft = await first.locator('.stats dd', { has: page.locator('[data-field="ttft_ms"]') }).textContent();
    check(/ = cloud prefill .* \+ transfer .* \+ ingest .* \+ local /.test(ttft), `TTFT split '${ttft}'`);
    const bars = await first.locator('svg.chart rect').count();
    check(bars >= 3, `the chart has ${bars} bars`);
    const contextOne = Number((await field(first, 'tokens')).value);

    const sessionId = await page.getAttribute('#session-title', 'data-session-id');
    check(/^web-[0-9a-f]{12}$/.test(sessionId), `session id '${sessionId}'`);
    const listed = page.locator(`#sessions li[data-session-id="${sessionId}"]`);
    await listed.waitFor({ timeout: 10000 });
    check(/tokens/.test(await listed.textContent()), 'the session list shows no token count');

    // Turn 2: a follow-up in the same session.
    const second = await sendTurn(page, 'And what did God call the light?', 'auto', 1);
    check((await second.locator('.text').textContent()).trim().length > 0, 'turn 2: no text');
    const contextTwo = Number((await field(second, 'tokens')).value);
    check(contextTwo > contextOne, `context ${contextTwo} after the follow-up, ${contextOne} before`);
    check(await page.locator('#sessions li').count() === 1, 'the follow-up made a second session');
    check(streamTypes.length === 2 && streamTypes.every((type) => /^text\/event-stream/.test(type)),
      `answers were not streamed: ${JSON.stringify(streamTypes)}`);

    // The screenshot: the viewport's size, and not blank.
    await first.scrollIntoViewIfNeeded();
    const png = await page.screenshot();
    if (screenshotPath) writeFileSync(screenshotPath, png);
    const image = decodePng(png);
    check(image.width === viewport.width && image.height === viewport.height,
      `screenshot ${image.width}x${image.height}, expected ${viewport.width}x${viewport.height}`);
    const content = pngContent(image);
    check(content.colours >= 50, `the screenshot has ${content.colours} colours: blank?`);
    check(content.foreground >= 0.05, `only ${(content.foreground * 100).toFixed(1)}% of the screenshot is not background`);
    check(problems.length === 0, problems.join('\n'));
    console.log(`web ui test: ok (turn 1: ${cloudPrefill.text}, KV ${kv.text}; ` +
      `screenshot ${image.width}x${image.height}, ${content.colours} colours, ` +
      `${(content.foreground * 100).toFixed(0)}% non-background)`);
  } finally {
    await browser.close();
  }
}

main().catch((error) => {
  console.error(`FAIL: ${error.message}`);
  process.exit(1);
});
