# cmake -DIN=<object> -DOUT=<header> -DNAME=<symbol> -P embed.cmake
# Writes the BPF object as a C array, for libbpf's bpf_object__open_mem().
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR len "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "((0x..,){16})" "\\1\n\t" bytes "${bytes}")
file(WRITE "${OUT}" "/* Generated from ${IN} by bpf/embed.cmake: do not edit. */\n"
	"static const unsigned char ${NAME}[] = {\n\t${bytes}\n};\n"
	"static const unsigned int ${NAME}_len = ${len};\n")
