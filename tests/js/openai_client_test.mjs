// The official `openai` npm client (tests/js/package.json pins it) against
// baton-edge --http: what a real client sees. Run by
// tests/e2e/openai_client_test.sh, which starts the agent and sets
//   BATON_BASE_URL  http://127.0.0.1:PORT/v1
//   BATON_API_KEY   a key the agent accepts
//   BATON_MODEL     the served model's id
//   BATON_ALIAS     a --model-alias of it
// Checks: chat (JSON and streamed), completions, logprobs (chat top_logprobs
// and the legacy shape, streamed too), penalties accepted, an unsupported
// field is a BadRequestError (400) naming it, any model name and the alias
// are served by the loaded model, a wrong key is an AuthenticationError (401).
// Prints one "ok NAME" line per check; exits 1 on the first failure.
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const baseURL = process.env.BATON_BASE_URL;
const apiKey = process.env.BATON_API_KEY;
const served = process.env.BATON_MODEL;
const alias = process.env.BATON_ALIAS;
assert.ok(baseURL && apiKey && served && alias, 'BATON_BASE_URL, BATON_API_KEY, BATON_MODEL, BATON_ALIAS');

const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 120_000 });
const local = { baton: { policy: 'local' } };  // extra body field: no cloud here
const greedy = { temperature: 0, max_tokens: 8, ...local };
const messages = [{ role: 'user', content: 'In the beginning' }];

async function check(name, body) {
  await body();
  console.log(`ok ${name}`);
}

function expectGreedyEntry(entry, topN) {
  assert.equal(typeof entry.token, 'string');
  assert.ok(entry.logprob <= 0, `logprob ${entry.logprob}`);
  // bytes: the token's raw bytes; a cut character's token reads "bytes:\\xNN...".
  assert.ok(Array.isArray(entry.bytes));
  if (!entry.token.startsWith('bytes:')) assert.deepEqual(entry.bytes, [...Buffer.from(entry.token, 'utf8')]);
  assert.equal(entry.top_logprobs.length, topN);
  assert.equal(entry.top_logprobs[0].logprob, entry.logprob, 'greedy picks the most likely token');
  for (let i = 1; i < topN; ++i) assert.ok(entry.top_logprobs[i].logprob <= entry.top_logprobs[i - 1].logprob);
}

await check('models list the served id and the alias', async () => {
  const ids = [];
  for await (const model of client.models.list()) ids.push(model.id);
  assert.equal(ids[0], served);
  assert.ok(ids.includes(alias), `aliases: ${ids}`);
});

await check('chat completion', async () => {
  const answer = await client.chat.completions.create({ model: 'gpt-4o-mini', messages, ...greedy });
  assert.equal(answer.object, 'chat.completion');
  assert.equal(answer.model, served, 'any model name is served by the loaded model');
  assert.equal(answer.choices[0].message.role, 'assistant');
  assert.equal(typeof answer.choices[0].message.content, 'string');
  assert.ok(answer.usage.completion_tokens > 0);
  assert.equal(answer.choices[0].logprobs, null);
});

await check('chat completion streamed equals the JSON answer', async () => {
  const whole = await client.chat.completions.create({ model: alias, messages, ...greedy });
  const stream = await client.chat.completions.create({
    model: alias, messages, stream: true, stream_options: { include_usage: true }, ...greedy,
  });
  let text = '';
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    if (chunk.choices.length === 0) continue;
    text += chunk.choices[0].delta.content ?? '';
    finish = chunk.choices[0].finish_reason ?? finish;
  }
  assert.equal(text, whole.choices[0].message.content);
  assert.equal(finish, whole.choices[0].finish_reason);
  assert.equal(usage.completion_tokens, whole.usage.completion_tokens);
});

await check('legacy completion', async () => {
  const answer = await client.completions.create({ model: 'llama', prompt: 'In the beginning', ...greedy });
  assert.equal(answer.object, 'text_completion');
  assert.equal(answer.model, served);
  assert.equal(typeof answer.choices[0].text, 'string');
  assert.ok(answer.usage.completion_tokens > 0);
});

let chatLogprobs = null;
await check('chat logprobs with top_logprobs', async () => {
  const answer = await client.chat.completions.create({
    model: served, messages, logprobs: true, top_logprobs: 3, ...greedy,
  });
  const content = answer.choices[0].logprobs.content;
  assert.equal(content.length, answer.usage.completion_tokens);
  for (const entry of content) expectGreedyEntry(entry, 3);
  chatLogprobs = content;
});

await check('chat logprobs streamed', async () => {
  const stream = await client.chat.completions.create({
    model: served, messages, logprobs: true, top_logprobs: 3, stream: true, ...greedy,
  });
  const content = [];
  for await (const chunk of stream) {
    const logprobs = chunk.choices[0]?.logprobs;
    if (logprobs?.content) content.push(...logprobs.content);
  }
  assert.deepEqual(content, chatLogprobs);
});

await check('legacy completion logprobs', async () => {
  const answer = await client.completions.create({
    model: served, prompt: 'In the beginning', logprobs: 2, ...greedy,
  });
  const logprobs = answer.choices[0].logprobs;
  const n = answer.usage.completion_tokens;
  assert.equal(logprobs.tokens.length, n);
  assert.equal(logprobs.token_logprobs.length, n);
  assert.equal(logprobs.top_logprobs.length, n);
  assert.equal(logprobs.text_offset.length, n);
  assert.equal(logprobs.text_offset[0], 0);
  for (let i = 0; i < n; ++i) {
    const best = Math.max(...Object.values(logprobs.top_logprobs[i]));
    assert.equal(logprobs.token_logprobs[i], best, 'greedy picks the most likely token');
  }
});

await check('frequency and presence penalties accepted', async () => {
  const answer = await client.chat.completions.create({
    model: served, messages, frequency_penalty: 1.5, presence_penalty: 0.5, ...greedy,
  });
  assert.ok(answer.usage.completion_tokens > 0);
  await assert.rejects(
    client.chat.completions.create({ model: served, messages, frequency_penalty: 2.5, ...greedy }),
    (error) => error instanceof OpenAI.BadRequestError && /frequency_penalty/.test(error.message));
});

await check('an unsupported field is a 400 naming it', async () => {
  await assert.rejects(
    client.chat.completions.create({
      model: served, messages, ...greedy,
      tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object' } } }],
    }),
    (error) => {
      assert.ok(error instanceof OpenAI.APIError, String(error));
      assert.equal(error.status, 400);
      assert.equal(error.param, 'tools');
      assert.match(error.message, /'tools'/);
      return true;
    });
  await assert.rejects(
    client.chat.completions.create({ model: served, messages, response_format: { type: 'json_object' }, ...greedy }),
    (error) => error.status === 400 && error.param === 'response_format');
});

await check('a wrong key is an AuthenticationError', async () => {
  const wrong = new OpenAI({ baseURL, apiKey: 'wrong-key-0123456789abcdef', maxRetries: 0 });
  await assert.rejects(
    wrong.chat.completions.create({ model: served, messages, ...greedy }),
    (error) => {
      assert.ok(error instanceof OpenAI.AuthenticationError, String(error));
      assert.equal(error.status, 401);
      return true;
    });
});
