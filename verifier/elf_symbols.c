#include "core/common.h"
#include "verifier/elf_symbols.h"
#include "core/util.h"

#include <elf.h>

/* The ELF structures are read with memcpy in host order: little-endian only. */
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "elf_symbols.c reads little-endian ELF files in host order"
#endif

struct elf_view {
	const unsigned char *data;
	size_t len;
	uint16_t type;           /* e_type */
	uint64_t shoff;          /* section header table */
	size_t shnum;
};

/* [off, off + size) lies inside the file (no overflow on the way). */
static bool in_file(const struct elf_view *e, uint64_t off, uint64_t size)
{
	return off <= e->len && size <= e->len - off;
}

static int read_header(struct elf_view *e, struct strbuf *why)
{
	Elf64_Ehdr eh;
	Elf64_Shdr first;

	if (e->len < sizeof(eh) || memcmp(e->data, ELFMAG, SELFMAG)) {
		strbuf_addstr(why, "not an ELF file");
		return -1;
	}
	memcpy(&eh, e->data, sizeof(eh));
	if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB) {
		strbuf_addstr(why, "not a 64-bit little-endian ELF file");
		return -1;
	}
	if (eh.e_type != ET_DYN && eh.e_type != ET_REL) {
		strbuf_addf(why, "ELF type %u is neither a shared library nor an object", eh.e_type);
		return -1;
	}
	if (!eh.e_shoff || eh.e_shentsize != sizeof(Elf64_Shdr)) {
		strbuf_addstr(why, "no usable section header table");
		return -1;
	}
	e->type = eh.e_type;
	e->shoff = eh.e_shoff;
	e->shnum = eh.e_shnum;
	if (!in_file(e, e->shoff, sizeof(first))) {
		strbuf_addstr(why, "section header table outside the file");
		return -1;
	}
	/* 65280 sections or more: the real count is section 0's sh_size */
	if (e->shnum == 0) {
		memcpy(&first, e->data + e->shoff, sizeof(first));
		if (first.sh_size > SIZE_MAX / sizeof(Elf64_Shdr)) {
			strbuf_addstr(why, "section count out of range");
			return -1;
		}
		e->shnum = (size_t)first.sh_size;
	}
	if (!e->shnum || !in_file(e, e->shoff, (uint64_t)e->shnum * sizeof(Elf64_Shdr))) {
		strbuf_addstr(why, "section header table outside the file");
		return -1;
	}
	return 0;
}

static void section(const struct elf_view *e, size_t i, Elf64_Shdr *sh)
{
	memcpy(sh, e->data + e->shoff + i * sizeof(*sh), sizeof(*sh));
}

/* Undefined names of one symbol table section, as pointers into the file. */
static int table_undefined(const struct elf_view *e, const Elf64_Shdr *symtab,
			   const char ***names, size_t *nr, size_t *alloc, struct strbuf *why)
{
	Elf64_Shdr strtab;
	const char *strs;
	size_t count;

	if (symtab->sh_entsize != sizeof(Elf64_Sym) || !in_file(e, symtab->sh_offset, symtab->sh_size) ||
	    symtab->sh_size % sizeof(Elf64_Sym)) {
		strbuf_addstr(why, "malformed symbol table");
		return -1;
	}
	if (symtab->sh_link == 0 || symtab->sh_link >= e->shnum) {
		strbuf_addstr(why, "symbol table without a string table");
		return -1;
	}
	section(e, symtab->sh_link, &strtab);
	if (strtab.sh_type != SHT_STRTAB || !in_file(e, strtab.sh_offset, strtab.sh_size) ||
	    !strtab.sh_size) {
		strbuf_addstr(why, "malformed string table");
		return -1;
	}
	strs = (const char *)e->data + strtab.sh_offset;
	count = (size_t)(symtab->sh_size / sizeof(Elf64_Sym));
	for (size_t i = 1; i < count; i++) { /* entry 0 is the null symbol */
		Elf64_Sym sym;

		memcpy(&sym, e->data + symtab->sh_offset + i * sizeof(sym), sizeof(sym));
		if (sym.st_shndx != SHN_UNDEF || !sym.st_name)
			continue;
		if (sym.st_name >= strtab.sh_size ||
		    !memchr(strs + sym.st_name, '\0', strtab.sh_size - sym.st_name)) {
			strbuf_addstr(why, "symbol name outside its string table");
			return -1;
		}
		if (!strs[sym.st_name])
			continue;
		if (*nr == *alloc) {
			*alloc = *alloc ? 2 * *alloc : 64;
			*names = xrealloc(*names, *alloc * sizeof(**names));
		}
		(*names)[(*nr)++] = strs + sym.st_name;
	}
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int kb_elf_undefined_symbols(const void *data, size_t len, struct strvec *out, struct strbuf *why)
{
	struct elf_view e = { .data = data, .len = len };
	const char **names = NULL;
	size_t nr = 0, alloc = 0, tables = 0;
	uint32_t want;
	int rc = -1;

	if (read_header(&e, why))
		goto out;
	/* the loader resolves a library's .dynsym; an object's references are in .symtab */
	want = e.type == ET_DYN ? SHT_DYNSYM : SHT_SYMTAB;
	for (size_t i = 0; i < e.shnum; i++) {
		Elf64_Shdr sh;

		section(&e, i, &sh);
		if (sh.sh_type != want)
			continue;
		tables++;
		if (table_undefined(&e, &sh, &names, &nr, &alloc, why))
			goto out;
	}
	if (!tables) {
		strbuf_addstr(why, e.type == ET_DYN ? "no dynamic symbol table" : "no symbol table");
		goto out;
	}
	if (nr)
		qsort(names, nr, sizeof(*names), cmp_str);
	for (size_t i = 0; i < nr; i++)
		if (!i || strcmp(names[i], names[i - 1]))
			strvec_push(out, names[i]);
	rc = 0;
out:
	free(names);
	return rc;
}
