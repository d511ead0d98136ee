upipe_script_test(golden golden)
upipe_script_test(train_learns train)
upipe_script_test(bad_input errors)
upipe_script_test(mem_report train)
