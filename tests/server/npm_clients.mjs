// Drives a running ds4-server with the official npm clients (openai, @anthropic-ai/sdk).
//   usage: node npm_clients.mjs <base-url> <npm-prefix>
// Every check throws on failure; the last line is "ALL OK <n> checks" on success.
import { createRequire } from 'node:module';
import path from 'node:path';

const [base, prefix] = process.argv.slice(2);
const require = createRequire(path.join(prefix, 'package.json'));
const OpenAI = require('openai').default ?? require('openai');
const AnthropicMod = require('@anthropic-ai/sdk');
const Anthropic = AnthropicMod.default ?? AnthropicMod;

let checks = 0;
function check(cond, what, detail) {
  if (!cond) throw new Error(`check failed: ${what}${detail !== undefined ? ': ' + JSON.stringify(detail) : ''}`);
  checks++;
}

const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: base, apiKey: 'unused', maxRetries: 0 });
const user = (content) => [{ role: 'user', content }];

// Models.
const models = await openai.models.list();
check(models.data.length === 1 && models.data[0].id === 'deepseek-v4-flash', 'models.list', models.data);
const model = await openai.models.retrieve('deepseek-v4-flash');
check(model.id === 'deepseek-v4-flash' && model.object === 'model', 'models.retrieve', model);

// Chat, non-stream.
const c1 = await openai.chat.completions.create({ model: 'deepseek-v4-flash', messages: user('Hello'), max_tokens: 4,
                                                  thinking: { type: 'disabled' } });
check(c1.object === 'chat.completion' && c1.choices[0].message.role === 'assistant', 'chat shape', c1);
check(['stop', 'length'].includes(c1.choices[0].finish_reason), 'chat finish', c1.choices[0]);
check(c1.usage.total_tokens === c1.usage.prompt_tokens + c1.usage.completion_tokens, 'chat usage', c1.usage);

// Second turn reuses the prefix.
const c2 = await openai.chat.completions.create({
  model: 'deepseek-v4-flash', max_tokens: 3, thinking: { type: 'disabled' },
  messages: [...user('Hello'), { role: 'assistant', content: c1.choices[0].message.content ?? '' }, ...user('More')] });
check(c2.usage.prompt_tokens_details.cached_tokens >= c1.usage.prompt_tokens - 1, 'cached_tokens', c2.usage);

// Chat, stream with usage.
const stream = await openai.chat.completions.create({ model: 'deepseek-v4-flash', messages: user('Hi'), max_tokens: 4,
                                                      stream: true, stream_options: { include_usage: true } });
const chunks = [];
for await (const ch of stream) chunks.push(ch);
check(chunks[0].choices[0].delta.role === 'assistant', 'first chunk role', chunks[0]);
const last = chunks[chunks.length - 1];
check(Array.isArray(last.choices) && last.choices.length === 0 && last.usage.completion_tokens >= 1, 'usage chunk', last);
check(chunks[chunks.length - 2].choices[0].finish_reason !== null, 'finish chunk', chunks[chunks.length - 2]);

// Stream without usage: no empty-choices chunk.
const s2 = await openai.chat.completions.create({ model: 'deepseek-v4-flash', messages: user('Hi'), max_tokens: 2, stream: true });
for await (const ch of s2) check(ch.choices.length === 1, 'no usage chunk unless asked', ch);

// Legacy completions.
const comp = await openai.completions.create({ model: 'deepseek-v4-flash', prompt: 'Once', max_tokens: 3 });
check(comp.object === 'text_completion' && typeof comp.choices[0].text === 'string', 'completions', comp);

// Responses, non-stream and stream.
const r1 = await openai.responses.create({ model: 'deepseek-v4-flash', input: 'Hello', max_output_tokens: 4 });
check(r1.object === 'response' && ['completed', 'incomplete'].includes(r1.status), 'responses shape', r1);
check(typeof r1.output_text === 'string' && r1.usage.input_tokens > 0, 'responses output_text/usage', r1);
const rs = await openai.responses.create({ model: 'deepseek-v4-flash', input: [{ role: 'user', content: 'Hi' }],
                                          max_output_tokens: 3, stream: true });
const types = [];
let seq = 0;
for await (const ev of rs) {
  check(ev.sequence_number === seq++, 'sequence_number', ev);
  types.push(ev.type);
}
check(types[0] === 'response.created', 'response.created first', types);
check(['response.completed', 'response.incomplete'].includes(types[types.length - 1]), 'terminal event', types);

// Anthropic, non-stream and stream.
const a1 = await anthropic.messages.create({ model: 'deepseek-v4-flash', max_tokens: 4, system: 'Be brief.', messages: user('Hi') });
check(a1.type === 'message' && a1.role === 'assistant' && a1.content.length >= 1, 'anthropic shape', a1);
check(['end_turn', 'max_tokens'].includes(a1.stop_reason), 'anthropic stop_reason', a1.stop_reason);
check(Number.isInteger(a1.usage.cache_read_input_tokens), 'anthropic usage', a1.usage);
const as = anthropic.messages.stream({ model: 'deepseek-v4-flash', max_tokens: 4, messages: user('Hello') });
const events = [];
as.on('streamEvent', (e) => events.push(e.type));
const final = await as.finalMessage();
check(events[0] === 'message_start' && events[events.length - 1] === 'message_stop', 'anthropic event order', events);
check(final.content.some((b) => b.type === 'text'), 'anthropic final text block', final);

// Errors.
let longText = '';
for (let i = 0; i < 400; i++) longText += `word${i} `;
try {
  await openai.chat.completions.create({ model: 'deepseek-v4-flash', messages: user(longText), max_tokens: 2 });
  check(false, 'context overflow must fail');
} catch (e) {
  check(e instanceof OpenAI.BadRequestError && e.status === 400 && e.code === 'context_length_exceeded', 'openai overflow error', e.error);
}
try {
  await anthropic.messages.create({ model: 'deepseek-v4-flash', max_tokens: 2, messages: user(longText) });
  check(false, 'anthropic overflow must fail');
} catch (e) {
  check(e instanceof Anthropic.BadRequestError && e.status === 400 && e.error?.error?.type === 'invalid_request_error',
        'anthropic overflow error', e.error);
}
try {
  await openai.chat.completions.create({ model: 'deepseek-v4-flash', messages: [] });
  check(false, 'empty messages must fail');
} catch (e) {
  check(e instanceof OpenAI.BadRequestError, 'empty messages error', e.message);
}
console.log(`ALL OK ${checks} checks`);
