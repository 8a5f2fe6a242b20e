/*
 * render ANALYSIS.json [NAME=VALUE ...]: print the CUDA source of one point
 * of a built-in template (parameters not named keep their defaults).
 * KB_DATA_DIR: the checkout whose bot/templates are rendered (default:
 * located as kernelbot does). For micro benchmarks of template variants.
 */
#include "core/strbuf.h"
#include "templates/template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
	struct strbuf text = STRBUF_INIT, why = STRBUF_INIT, src = STRBUF_INIT;
	struct kb_template *t = NULL;
	const struct kb_template_space *sp;
	cJSON *an = NULL;
	int64_t *point = NULL;
	int rc = 1;

	if (argc < 2) {
		fprintf(stderr, "usage: render ANALYSIS.json [NAME=VALUE ...]\n");
		return 2;
	}
	if (strbuf_read_file(&text, argv[1], 1 << 22) < 0 || !(an = cJSON_Parse(text.buf))) {
		fprintf(stderr, "render: '%s' is not a readable JSON analysis\n", argv[1]);
		goto out;
	}
	if (kb_template_new(&t, an, KB_BACKEND_CUDA, getenv("KB_DATA_DIR"), &why)) {
		fprintf(stderr, "render: %s\n", why.buf);
		goto out;
	}
	sp = kb_template_space(t);
	point = calloc(sp->nr + 1, sizeof(*point));
	if (!point)
		goto out;
	for (size_t i = 0; i < sp->nr; i++)
		point[i] = sp->params[i].values[0];
	for (int a = 2; a < argc; a++) {
		const char *eq = strchr(argv[a], '=');
		size_t i = 0;

		while (eq && i < sp->nr && (strlen(sp->params[i].name) != (size_t)(eq - argv[a]) ||
					    strncmp(sp->params[i].name, argv[a], (size_t)(eq - argv[a]))))
			i++;
		if (!eq || i == sp->nr) {
			fprintf(stderr, "render: '%s' is not NAME=VALUE with a parameter of this template\n",
				argv[a]);
			goto out;
		}
		point[i] = strtoll(eq + 1, NULL, 10);
	}
	if (kb_template_render(t, point, &src)) {
		fprintf(stderr, "render: a value is not in its parameter's list\n");
		goto out;
	}
	fputs(src.buf, stdout);
	rc = 0;
out:
	free(point);
	kb_template_free(t);
	cJSON_Delete(an);
	strbuf_release(&text);
	strbuf_release(&why);
	strbuf_release(&src);
	return rc;
}
