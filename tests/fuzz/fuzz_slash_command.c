/*
 * Slash commands in pull request comments (jobs/trigger.c
 * kb_jobs_parse_command), from anyone who can comment: the first
 * non-blank line `/kernelbot stop` or `/kernelbot run`.
 *
 * Invariants: the answer is NULL, "stop" or "run", and only for a body
 * whose first word is /kernelbot followed by that word.
 */
#include "core/common.h"
#include "jobs/jobs.h"
#include "fuzz.h"

int kb_fuzz_slash_command(const uint8_t *data, size_t size)
{
	char *body = kb_fuzz_str(data, size);
	const char *cmd, *p = body;
	size_t n;

	kb_fuzz_init();
	cmd = kb_jobs_parse_command(body);
	if (cmd) {
		FUZZ_CHECK(!strcmp(cmd, "stop") || !strcmp(cmd, "run"));
		p += strspn(p, " \t\r\n");
		FUZZ_CHECK(!strncmp(p, "/kernelbot", 10) && (p[10] == ' ' || p[10] == '\t'));
		p += 10;
		p += strspn(p, " \t");
		n = strlen(cmd);
		FUZZ_CHECK(!strncmp(p, cmd, n) && (!p[n] || strchr(" \t\r\n", p[n])));
	}
	free(body);
	return 0;
}

KB_FUZZ_ENTRY(slash_command)
