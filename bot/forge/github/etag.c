#include "core/common.h"
#include "core/util.h"
#include "forge/github/gh.h"

void gh_etag_cache_init(struct gh_etag_cache *c, size_t max_entries, size_t max_bytes)
{
	memset(c, 0, sizeof(*c));
	c->max_entries = max_entries;
	c->max_bytes = max_bytes;
}

static void entry_free(struct gh_etag_entry *e)
{
	free(e->url);
	free(e->etag);
	free(e->link);
	free(e->body);
}

void gh_etag_cache_release(struct gh_etag_cache *c)
{
	for (size_t i = 0; i < c->nr; i++)
		entry_free(&c->v[i]);
	free(c->v);
	memset(c, 0, sizeof(*c));
}

static ssize_t find(const struct gh_etag_cache *c, const char *url)
{
	for (size_t i = 0; i < c->nr; i++)
		if (!strcmp(c->v[i].url, url))
			return (ssize_t)i;
	return -1;
}

const struct gh_etag_entry *gh_etag_get(const struct gh_etag_cache *c, const char *url)
{
	ssize_t i = find(c, url);

	return i < 0 ? NULL : &c->v[i];
}

static void remove_at(struct gh_etag_cache *c, size_t i)
{
	c->bytes -= c->v[i].body_len;
	entry_free(&c->v[i]);
	memmove(&c->v[i], &c->v[i + 1], (c->nr - i - 1) * sizeof(*c->v));
	c->nr--;
}

void gh_etag_drop(struct gh_etag_cache *c, const char *url)
{
	ssize_t i = find(c, url);

	if (i >= 0)
		remove_at(c, (size_t)i);
}

void gh_etag_put(struct gh_etag_cache *c, const char *url, const char *etag, const char *link,
		 const char *body, size_t len)
{
	struct gh_etag_entry *e;

	gh_etag_drop(c, url);
	if (!etag || !*etag || !c->max_entries || len > c->max_bytes)
		return;
	while (c->nr && (c->nr >= c->max_entries || c->bytes + len > c->max_bytes))
		remove_at(c, 0);
	if (c->nr == c->alloc) {
		c->alloc = c->alloc ? c->alloc * 2 : 16;
		c->v = xrealloc(c->v, c->alloc * sizeof(*c->v));
	}
	e = &c->v[c->nr++];
	e->url = xstrdup(url);
	e->etag = xstrdup(etag);
	e->link = link ? xstrdup(link) : NULL;
	e->body = xmalloc(len + 1);
	memcpy(e->body, body, len);
	e->body[len] = '\0';
	e->body_len = len;
	c->bytes += len;
}
