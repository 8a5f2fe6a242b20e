/*
 * A model's reply body (llm/openai.c, llm/anthropic.c) and the error text
 * made from a failed one (llm.c), then the kernel taken out of the text
 * (search/extract.c), as the search does with each answer.
 *
 *   byte 0  the provider (bit 0: Anthropic, else OpenAI-compatible)
 *   then    the body
 *
 * Invariants: 0 exactly when the status is OK with text that is not
 * blank; token counts are never negative; an error is one line.
 */
#include "core/common.h"
#include "core/strbuf.h"
#include "llm/llm.h"
#include "llm/llm_priv.h"
#include "search/extract.h"
#include "fuzz.h"

int kb_fuzz_llm_reply(const uint8_t *data, size_t size)
{
	enum kb_llm_provider prov;
	struct kb_llm_reply reply;
	struct strbuf err = STRBUF_INIT, kernel = STRBUF_INIT, why = STRBUF_INIT;
	const char *body;
	size_t len;
	int rc;

	kb_fuzz_init();
	if (!size)
		return 0;
	prov = data[0] & 1 ? KB_LLM_ANTHROPIC : KB_LLM_OPENAI;
	body = (const char *)data + 1;
	len = size - 1;
	kb_llm_reply_init(&reply);
	rc = kb_llm_parse_reply(prov, body, len, &reply);
	FUZZ_CHECK((rc == 0) == (reply.status == KB_LLM_OK));
	FUZZ_CHECK(reply.prompt_tokens >= 0 && reply.completion_tokens >= 0);
	if (!rc) {
		FUZZ_CHECK(!llm_is_blank(&reply.text));
		kb_extract_kernel(reply.text.buf, &kernel, &why);
	} else {
		FUZZ_CHECK(reply.error.len && !strchr(reply.error.buf, '\n'));
	}
	llm_add_error_body(&err, body, len);
	FUZZ_CHECK(!strchr(err.buf, '\n') && !strchr(err.buf, '\r'));
	kb_llm_reply_release(&reply);
	strbuf_release(&err);
	strbuf_release(&kernel);
	strbuf_release(&why);
	return 0;
}

KB_FUZZ_ENTRY(llm_reply)
