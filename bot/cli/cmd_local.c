#include "core/common.h"
#include "cli/cli.h"
#include "core/config.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "forge/forge.h"
#include "forge/local/local.h"

#include <getopt.h>
#include <inttypes.h>

/*
 * `kernelbot local`: play the people around the bot on the local forge
 * (records under <state_dir>/local-forge): register a git repository,
 * open a pull request, label it, comment. The demo (examples/demo-bot.sh)
 * and the end-to-end tests use it; the bot itself never does.
 */

static void usage(FILE *fp)
{
	fprintf(fp,
		"usage: kernelbot local [-c FILE] [--as LOGIN] COMMAND ARGS...\n"
		"\n"
		"Act on the local forge ([bot] forge = local; records under\n"
		"<state_dir>/local-forge) as LOGIN (default: the repository's owner):\n"
		"\n"
		"  add-repo OWNER/NAME GITDIR         register a git repository\n"
		"  permit OWNER/NAME LOGIN ROLE       give LOGIN a role (none, read, triage,\n"
		"                                     write, maintain, admin)\n"
		"  open-pr OWNER/NAME HEAD BASE TITLE open a pull request; prints its number\n"
		"  label OWNER/NAME N LABEL           add a label\n"
		"  unlabel OWNER/NAME N LABEL         remove a label\n"
		"  comment OWNER/NAME N TEXT          comment on a pull request\n"
		"  show OWNER/NAME N                  print the path of its markdown page\n"
		"\n"
		"exit: 0 done, 1 failed, 2 usage error\n");
}

static int parse_number(const char *s, int64_t *out)
{
	return kb_parse_i64(s, out) || *out < 1 ? -1 : 0;
}

int cmd_local(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "as", required_argument, NULL, 'a' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct kb_config cfg;
	struct kb_forge *f = NULL;
	struct kb_forge_pr pr = KB_FORGE_PR_INIT;
	struct strbuf owner = STRBUF_INIT, path = STRBUF_INIT;
	const char *config_path = NULL, *as = NULL, *cmd, *repo;
	enum kb_forge_perm perm;
	int64_t number = 0, id;
	int c, nargs, rc = KB_EXIT_USAGE;
	bool loaded = false;

	while ((c = getopt_long(argc, argv, "+c:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			config_path = optarg;
			break;
		case 'a':
			as = optarg;
			break;
		case 'h':
			usage(stdout);
			return KB_EXIT_OK;
		default:
			return cli_usage_error("local", "unknown option");
		}
	}
	if (argc - optind < 2)
		return cli_usage_error("local", "expected COMMAND OWNER/NAME ...");
	cmd = argv[optind];
	repo = argv[optind + 1];
	nargs = argc - optind - 2;
	if (!kb_forge_repo_valid(repo))
		return cli_usage_error("local", "'%s' is not OWNER/NAME", repo);
	rc = cli_load_config(config_path, &cfg);
	loaded = true;
	if (rc)
		goto out;
	rc = KB_EXIT_NO;
	if (kb_forge_open(&f, "local", &cfg))
		goto out;
	strbuf_add(&owner, repo, strcspn(repo, "/"));
	if (kb_forge_local_set_actor(f, as ? as : owner.buf))
		goto out;

	if (!strcmp(cmd, "add-repo") && nargs == 1) {
		if (!kb_forge_local_add_repo(f, repo, argv[optind + 2]))
			rc = KB_EXIT_OK;
	} else if (!strcmp(cmd, "permit") && nargs == 2) {
		if (kb_forge_perm_parse(argv[optind + 3], &perm)) {
			rc = cli_usage_error("local", "unknown role '%s'", argv[optind + 3]);
			goto out;
		}
		if (!kb_forge_local_set_permission(f, repo, argv[optind + 2], perm))
			rc = KB_EXIT_OK;
	} else if (!strcmp(cmd, "open-pr") && nargs == 3) {
		struct kb_forge_new_pr spec = { argv[optind + 2], argv[optind + 3], argv[optind + 4],
						NULL, false };

		c = kb_forge_open_pr(f, &pr, repo, &spec);
		if (!c || c == KB_EEXISTS) {
			printf("%" PRId64 "\n", pr.number);
			rc = KB_EXIT_OK;
		}
	} else if ((!strcmp(cmd, "label") || !strcmp(cmd, "unlabel")) && nargs == 2) {
		const char *label = argv[optind + 3];

		if (parse_number(argv[optind + 2], &number)) {
			rc = cli_usage_error("local", "'%s' is not a pull request number", argv[optind + 2]);
			goto out;
		}
		if (!strcmp(cmd, "label") ? !kb_forge_add_labels(f, repo, number, &label, 1)
					  : !kb_forge_remove_label(f, repo, number, label))
			rc = KB_EXIT_OK;
	} else if (!strcmp(cmd, "comment") && nargs == 2) {
		if (parse_number(argv[optind + 2], &number)) {
			rc = cli_usage_error("local", "'%s' is not a pull request number", argv[optind + 2]);
			goto out;
		}
		if (!kb_forge_post_comment(f, &id, repo, number, argv[optind + 3])) {
			printf("%" PRId64 "\n", id);
			rc = KB_EXIT_OK;
		}
	} else if (!strcmp(cmd, "show") && nargs == 1) {
		if (parse_number(argv[optind + 2], &number)) {
			rc = cli_usage_error("local", "'%s' is not a pull request number", argv[optind + 2]);
			goto out;
		}
		if (!kb_forge_local_pr_path(f, &path, repo, number)) {
			printf("%s\n", path.buf);
			rc = KB_EXIT_OK;
		}
	} else {
		rc = cli_usage_error("local", "unknown command '%s' or wrong number of arguments", cmd);
	}
out:
	kb_forge_pr_release(&pr);
	kb_forge_free(f);
	strbuf_release(&owner);
	strbuf_release(&path);
	if (loaded)
		kb_config_release(&cfg);
	return rc;
}
